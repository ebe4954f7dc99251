// CPU unscale kernel: every ISA path and dtype, special values at every kind of boundary, errors.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <set>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "autocastgen/kernels/scaler_cpu.h"
#include "kernel_test_util.h"

namespace autocastgen::kernels {
namespace {

using namespace testing;  // NOLINT

std::vector<CpuIsa> available_isas() {
  std::vector<CpuIsa> isas{CpuIsa::Baseline};
  if (best_cpu_isa() == CpuIsa::Avx2) isas.push_back(CpuIsa::Avx2);
  return isas;
}

// Independent reference for one element: the compiler's arithmetic and conversions.
std::uint64_t reference_unscale(DType d, std::uint64_t bits, float inv) {
  switch (d) {
    case DType::Float32: return f32_bits(f32_from(static_cast<std::uint32_t>(bits)) * inv);
    case DType::Float16:
      return ref_float_to_half(ref_half_to_float(static_cast<std::uint16_t>(bits)) * inv);
    case DType::BFloat16: return ref_float_to_bf16(f32_from(static_cast<std::uint32_t>(bits) << 16) * inv);
    case DType::Float64: {
      double x;
      std::memcpy(&x, &bits, 8);
      x *= static_cast<double>(inv);
      std::uint64_t u;
      std::memcpy(&u, &x, 8);
      return u;
    }
  }
  return 0;
}

bool bits_are_nan(DType d, std::uint64_t b) {
  switch (d) {
    case DType::Float32: return std::isnan(f32_from(static_cast<std::uint32_t>(b)));
    case DType::Float16: return half_is_nan(static_cast<std::uint16_t>(b));
    case DType::BFloat16: return bf16_is_nan(static_cast<std::uint16_t>(b));
    case DType::Float64: return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (b << 12) != 0;
  }
  return false;
}

// Equal bits, or both NaN (NaN payloads are not part of the contract, see Note [conversions]).
::testing::AssertionResult same_value(DType d, std::uint64_t expected, std::uint64_t actual) {
  if (expected == actual || (bits_are_nan(d, expected) && bits_are_nan(d, actual))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << dtype_name(d) << ": expected bits 0x" << std::hex << expected
                                       << ", got 0x" << actual;
}

struct IsaDType {
  CpuIsa isa;
  DType dtype;
};

class CpuUnscale : public ::testing::TestWithParam<IsaDType> {
 protected:
  float run(std::vector<Buffer*> buffers, float inv, float found_inf = 0.0f,
            const Executor* executor = nullptr) {
    std::vector<GradSpan> spans;
    for (Buffer* b : buffers) spans.push_back(b->span());
    non_finite_check_and_unscale_cpu(spans, &found_inf, inv, {GetParam().isa, executor});
    return found_inf;
  }
};

TEST_P(CpuUnscale, MatchesReferenceOnEveryLengthUpTo100) {
  const DType d = GetParam().dtype;
  std::mt19937_64 rng(7);
  for (std::int64_t n = 0; n <= 100; ++n) {
    for (std::size_t misalign : {std::size_t{0}, dtype_size(d)}) {
      Buffer b(d, n, misalign);
      for (std::int64_t i = 0; i < n; ++i) b.set(i, random_finite_bits(d, rng));
      const Buffer before = b;
      ASSERT_EQ(run({&b}, 0.125f), 0.0f) << "n=" << n;
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_value(d, reference_unscale(d, before.get(i), 0.125f), b.get(i))) << "n=" << n << " i=" << i;
      }
      // Nothing outside the span is touched.
      ASSERT_EQ(std::vector<unsigned char>(b.bytes.begin() + static_cast<std::ptrdiff_t>(b.offset + n * dtype_size(d)), b.bytes.end()),
                std::vector<unsigned char>(before.bytes.begin() + static_cast<std::ptrdiff_t>(b.offset + n * dtype_size(d)), before.bytes.end()));
    }
  }
}

TEST_P(CpuUnscale, SpecialValueAtEveryPositionSetsFoundInf) {
  const DType d = GetParam().dtype;
  std::mt19937_64 rng(11);
  for (Special s : {Special::PosInf, Special::NegInf, Special::NaN}) {
    for (std::int64_t n : {1, 7, 8, 9, 16, 17, 33}) {
      for (std::int64_t pos = 0; pos < n; ++pos) {
        Buffer b(d, n);
        for (std::int64_t i = 0; i < n; ++i) b.set(i, random_finite_bits(d, rng));
        b.set(pos, special_bits(d, s));
        const Buffer before = b;
        ASSERT_EQ(run({&b}, 0.5f), 1.0f) << special_name(s) << " n=" << n << " pos=" << pos;
        // The other elements are still unscaled, and the special value stays what it was.
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(same_value(d, reference_unscale(d, before.get(i), 0.5f), b.get(i)));
        }
      }
    }
  }
}

TEST_P(CpuUnscale, SpecialValuesAtGrainBoundariesOfAMultiTensorList) {
  // Workers take kCpuPieceElements-long pieces of the concatenated list; put the special value
  // just before, at and after piece and tensor boundaries.
  const DType d = GetParam().dtype;
  const std::int64_t g = kCpuPieceElements;
  const std::vector<std::int64_t> sizes{g - 1, 1, 0, g + 3, 2 * g, 5, 0};
  std::int64_t total = 0;
  for (std::int64_t s : sizes) total += s;
  std::vector<std::int64_t> positions{0, g - 2, g - 1, g, g + 1, 2 * g - 1, 2 * g, 3 * g + 2, total - 1};
  for (const Executor* ex : {&serial_executor(), &thread_executor()}) {
    for (std::int64_t global : positions) {
      std::vector<Buffer> buffers;
      for (std::int64_t s : sizes) buffers.emplace_back(d, s);
      std::int64_t offset = 0;
      for (Buffer& b : buffers) {
        // Buffers start as +0.0 everywhere.
        if (global >= offset && global < offset + b.numel) b.set(global - offset, special_bits(d, Special::NaN));
        offset += b.numel;
      }
      std::vector<Buffer*> ptrs;
      for (Buffer& b : buffers) ptrs.push_back(&b);
      ASSERT_EQ(run(ptrs, 0.25f, 0.0f, ex), 1.0f) << "position " << global;
    }
    std::vector<Buffer> clean;
    for (std::int64_t s : sizes) clean.emplace_back(d, s);
    std::vector<Buffer*> ptrs;
    for (Buffer& b : clean) ptrs.push_back(&b);
    ASSERT_EQ(run(ptrs, 0.25f, 0.0f, ex), 0.0f);
  }
}

TEST_P(CpuUnscale, ZeroSizeListsAndTensors) {
  const DType d = GetParam().dtype;
  EXPECT_EQ(run({}, 0.5f), 0.0f);
  EXPECT_EQ(run({}, 0.5f, 1.0f), 1.0f);  // found_inf is only ever set, never cleared
  Buffer empty(d, 0);
  Buffer empty2(d, 0);
  EXPECT_EQ(run({&empty, &empty2}, 0.5f), 0.0f);
  // A zero-size gradient with a null pointer is valid.
  float found = 0.0f;
  const GradSpan null_empty{nullptr, 0, d};
  non_finite_check_and_unscale_cpu({&null_empty, 1}, &found, 0.5f, {GetParam().isa});
  EXPECT_EQ(found, 0.0f);
  Buffer one(d, 1);
  one.set(0, special_bits(d, Special::NegInf));
  EXPECT_EQ(run({&empty, &one, &empty2}, 0.5f), 1.0f);
}

TEST_P(CpuUnscale, InvScaleOfOneChecksWithoutChangingAnyBit) {
  const DType d = GetParam().dtype;
  std::mt19937_64 rng(5);
  Buffer b(d, 77);
  for (std::int64_t i = 0; i < b.numel; ++i) b.set(i, random_finite_bits(d, rng));
  // A NaN with an unusual payload stays bit-identical too.
  const std::uint64_t odd_nan = special_bits(d, Special::NaN) | 1u;
  b.set(40, odd_nan);
  const Buffer before = b;
  EXPECT_EQ(run({&b}, 1.0f), 1.0f);
  EXPECT_EQ(b.bytes, before.bytes);
}

TEST_P(CpuUnscale, SameGradientListedTwiceIsUnscaledTwice) {
  const DType d = GetParam().dtype;
  std::mt19937_64 rng(3);
  Buffer b(d, 3 * kCpuPieceElements + 5);
  for (std::int64_t i = 0; i < b.numel; ++i) b.set(i, random_finite_bits(d, rng));
  const Buffer before = b;
  float found = 0.0f;
  const std::vector<GradSpan> spans{b.span(), b.span()};
  non_finite_check_and_unscale_cpu(spans, &found, 0.5f, {GetParam().isa, &thread_executor()});
  for (std::int64_t i = 0; i < b.numel; ++i) {
    ASSERT_TRUE(same_value(d, reference_unscale(d, reference_unscale(d, before.get(i), 0.5f), 0.5f), b.get(i)));
  }
}

TEST_P(CpuUnscale, ManyTensorsInParallelMatchTheReference) {
  const DType d = GetParam().dtype;
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<std::int64_t> size(0, 9000);
  std::vector<Buffer> buffers;
  for (int t = 0; t < 300; ++t) buffers.emplace_back(d, size(rng), (t % 3) * dtype_size(d));
  for (Buffer& b : buffers) {
    for (std::int64_t i = 0; i < b.numel; ++i) b.set(i, random_finite_bits(d, rng, 14));
  }
  const std::vector<Buffer> before = buffers;
  std::vector<Buffer*> ptrs;
  for (Buffer& b : buffers) ptrs.push_back(&b);
  const float inv = 1.0f / 65536.0f * 3.0f;
  EXPECT_EQ(run(ptrs, inv, 0.0f, &thread_executor()), 0.0f);
  for (std::size_t t = 0; t < buffers.size(); ++t) {
    for (std::int64_t i = 0; i < buffers[t].numel; ++i) {
      ASSERT_TRUE(same_value(d, reference_unscale(d, before[t].get(i), inv), buffers[t].get(i)))
          << "tensor " << t << " element " << i;
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<IsaDType>& info) {
  return std::string(cpu_isa_name(info.param.isa)) + "_" + dtype_name(info.param.dtype);
}

std::vector<IsaDType> all_params() {
  std::vector<IsaDType> params;
  for (CpuIsa isa : available_isas()) {
    for (DType d : kAllDTypes) params.push_back({isa, d});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, CpuUnscale, ::testing::ValuesIn(all_params()), param_name);

// The vector path must give the same bits as the baseline (= per-element, GPU) path on any input,
// NaN payloads included, since both implement the same conversions.
TEST(CpuUnscaleIsa, Avx2IsBitIdenticalToBaselineOnArbitraryBits) {
  if (best_cpu_isa() != CpuIsa::Avx2) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C";
  std::mt19937_64 rng(42);
  for (DType d : kAllDTypes) {
    for (float inv : {0.5f, 1.0f / 3.0f, 1e-8f, 3e4f, 0.0f, -2.0f, std::numeric_limits<float>::infinity()}) {
      Buffer a(d, 4099);
      for (std::int64_t i = 0; i < a.numel; ++i) a.set(i, rng());  // any bits: NaNs, subnormals, ...
      Buffer b = a;
      float fa = 0.0f;
      float fb = 0.0f;
      non_finite_check_and_unscale_cpu({std::vector<GradSpan>{a.span()}}, &fa, inv, {CpuIsa::Baseline});
      non_finite_check_and_unscale_cpu({std::vector<GradSpan>{b.span()}}, &fb, inv, {CpuIsa::Avx2});
      ASSERT_EQ(fa, fb) << dtype_name(d);
      for (std::int64_t i = 0; i < a.numel; ++i) {
        ASSERT_EQ(a.get(i), b.get(i)) << dtype_name(d) << " inv=" << inv << " element " << i;
      }
    }
  }
}

TEST(CpuUnscaleIsa, AutoPicksTheBestIsaAndNamesAreStable) {
  EXPECT_NE(best_cpu_isa(), CpuIsa::Auto);
  EXPECT_STREQ(cpu_isa_name(CpuIsa::Avx2), "avx2");
  EXPECT_STREQ(cpu_isa_name(CpuIsa::Baseline), "baseline");
}

// Asks for a fixed number of workers and runs them one after the other, recording them.
class RecordingExecutor final : public Executor {
 public:
  explicit RecordingExecutor(std::int64_t wanted) : wanted_(wanted) {}
  std::int64_t workers_for(std::int64_t elements) const override {
    asked_for = elements;
    return wanted_;
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    started = workers;
    for (std::int64_t w = 0; w < workers; ++w) body(w);
  }
  mutable std::int64_t asked_for = -1;
  mutable std::int64_t started = -1;

 private:
  std::int64_t wanted_;
};

TEST(CpuUnscaleExecutor, AsksForTheTotalAndStartsNoMoreWorkersThanPieces) {
  Buffer a(DType::Float32, kCpuPieceElements + 10);
  Buffer b(DType::BFloat16, kCpuPieceElements);
  b.set(kCpuPieceElements - 1, special_bits(DType::BFloat16, Special::PosInf));
  for (std::int64_t wanted : {std::int64_t{1}, std::int64_t{2}, std::int64_t{50}}) {
    RecordingExecutor ex(wanted);
    float found = 0.0f;
    non_finite_check_and_unscale_cpu({std::vector<GradSpan>{a.span(), b.span()}}, &found, 1.0f, {CpuIsa::Auto, &ex});
    EXPECT_EQ(ex.asked_for, 2 * kCpuPieceElements + 10);
    EXPECT_EQ(ex.started, std::min<std::int64_t>(wanted, 3));  // 3 pieces
    EXPECT_EQ(found, 1.0f) << "worker count " << wanted;
  }
}

// Two workers where worker 0 stalls until worker 1 has returned: with pieces taken from a shared
// counter, worker 1 has done all of the work by then (with fixed shares it would have done half).
class StallingExecutor final : public Executor {
 public:
  explicit StallingExecutor(std::function<void()> after_worker_1) : after_worker_1_(std::move(after_worker_1)) {}
  std::int64_t workers_for(std::int64_t) const override { return 2; }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    ASSERT_EQ(workers, 2);
    std::thread second([&] { body(1); });
    second.join();
    after_worker_1_();
    body(0);
  }

 private:
  std::function<void()> after_worker_1_;
};

TEST(CpuUnscaleExecutor, IdleWorkersTakeOverTheWorkOfAStalledOne) {
  Buffer a(DType::Float32, 5 * kCpuPieceElements);
  for (std::int64_t i = 0; i < a.numel; ++i) a.set(i, f32_bits(4.0f));
  a.set(0, special_bits(DType::Float32, Special::NaN));
  int checked = 0;
  StallingExecutor ex([&] {
    for (std::int64_t i = 1; i < a.numel; ++i) ASSERT_EQ(a.get(i), f32_bits(2.0f)) << "element " << i;
    ++checked;
  });
  float found = 0.0f;
  non_finite_check_and_unscale_cpu({std::vector<GradSpan>{a.span()}}, &found, 0.5f, {CpuIsa::Auto, &ex});
  EXPECT_EQ(checked, 1);
  EXPECT_EQ(found, 1.0f);
}

class ThrowingExecutor final : public Executor {
 public:
  std::int64_t workers_for(std::int64_t) const override { return 1; }
  void run(std::int64_t, const std::function<void(std::int64_t)>&) const override {
    throw std::runtime_error("executor failed");
  }
};

TEST(CpuUnscaleExecutor, ExecutorErrorsPropagateAndFoundInfIsUntouched) {
  ThrowingExecutor ex;
  Buffer a(DType::Float32, 10);
  a.set(3, special_bits(DType::Float32, Special::NaN));
  float found = 0.0f;
  EXPECT_THROW(non_finite_check_and_unscale_cpu({std::vector<GradSpan>{a.span()}}, &found, 0.5f, {CpuIsa::Auto, &ex}),
               std::runtime_error);
  EXPECT_EQ(found, 0.0f);
}

TEST(CpuUnscaleExecutor, ThreadExecutorRunsEveryWorkerOnceAndRethrows) {
  const Executor& ex = thread_executor();
  EXPECT_EQ(ex.workers_for(10), 1);
  EXPECT_GE(ex.workers_for(std::int64_t{1} << 30), 1);
  std::vector<std::atomic<int>> hits(7);
  ex.run(7, [&](std::int64_t w) { hits[static_cast<std::size_t>(w)].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(ex.run(3, [](std::int64_t w) { if (w == 2) throw std::runtime_error("worker 2"); }),
               std::runtime_error);
}

// Note [worker pool] in executor.cpp: concurrent callers and nested calls run their slots on
// their own thread; every slot still runs exactly once.
TEST(CpuUnscaleExecutor, ThreadExecutorIsSafeFromManyThreadsAndFromInsideABody) {
  const Executor& ex = thread_executor();
  std::atomic<int> failures{0};
  const auto caller = [&] {
    for (int call = 0; call < 200; ++call) {
      std::vector<std::atomic<int>> hits(5);
      ex.run(5, [&](std::int64_t w) {
        hits[static_cast<std::size_t>(w)].fetch_add(1);
        if (w == 3) {  // nested: runs serially on this thread
          std::vector<std::atomic<int>> inner(3);
          ex.run(3, [&](std::int64_t v) { inner[static_cast<std::size_t>(v)].fetch_add(1); });
          for (auto& h : inner) failures += h.load() != 1;
        }
      });
      for (auto& h : hits) failures += h.load() != 1;
    }
  };
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) callers.emplace_back(caller);
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(CpuUnscaleExecutor, ThreadExecutorRunsBodiesOnPoolThreads) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one hardware thread: the pool has no helpers";
  // Each body waits a little so a helper can claim the other slot; on a busy machine a helper may
  // come late (then the caller runs both slots), so several calls are allowed.
  bool seen_two_threads = false;
  for (int call = 0; call < 50 && !seen_two_threads; ++call) {
    std::mutex m;
    std::set<std::thread::id> ids;
    thread_executor().run(2, [&](std::int64_t) {
      {
        const std::lock_guard<std::mutex> lock(m);
        ids.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
    seen_two_threads = ids.size() == 2;
  }
  EXPECT_TRUE(seen_two_threads);
}

TEST(CpuUnscaleExecutor, ThreadExecutorWorksInAForkedChild) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support starting threads after a multi-threaded fork";
#endif
  // Start the parent's pool first, so the child inherits a pool whose threads it does not have.
  std::atomic<int> parent_hits{0};
  thread_executor().run(2, [&](std::int64_t) { parent_hits.fetch_add(1); });
  ASSERT_EQ(parent_hits.load(), 2);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(30);  // a hang in the child ends it with SIGALRM instead of hanging the test
    std::atomic<int> hits{0};
    thread_executor().run(4, [&](std::int64_t) { hits.fetch_add(1); });
    Buffer a(DType::Float32, 4 * kCpuPieceElements);
    for (std::int64_t i = 0; i < a.numel; ++i) a.set(i, f32_bits(4.0f));
    float found = 0.0f;
    non_finite_check_and_unscale_cpu({std::vector<GradSpan>{a.span()}}, &found, 0.5f,
                                     {CpuIsa::Auto, &thread_executor()});
    bool ok = hits.load() == 4 && found == 0.0f;
    for (std::int64_t i = 0; i < a.numel; ++i) ok = ok && a.get(i) == f32_bits(2.0f);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

void expect_invalid(const std::vector<GradSpan>& spans, float* found, const std::string& needle,
                    CpuIsa isa = CpuIsa::Auto) {
  try {
    non_finite_check_and_unscale_cpu(spans, found, 0.5f, {isa});
    ADD_FAILURE() << "no exception; expected one mentioning: " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non_finite_check_and_unscale_cpu"), std::string::npos) << e.what();
  }
}

TEST(CpuUnscaleErrors, MalformedListsAreRejectedWithClearMessages) {
  float found = 0.0f;
  std::vector<float> data(8);
  expect_invalid({{data.data(), 8, DType::Float32}, {data.data(), -1, DType::Float32}}, &found,
                 "gradient 1 has a negative numel (-1)");
  expect_invalid({{nullptr, 3, DType::Float16}}, &found, "gradient 0 has numel > 0 and a null data pointer");
  expect_invalid({{reinterpret_cast<unsigned char*>(data.data()) + 1, 2, DType::Float32}}, &found,
                 "gradient 0 is not aligned to its element size (4 bytes for float32)");
  expect_invalid({{data.data(), 2, static_cast<DType>(9)}}, &found, "gradient 0 has an unknown dtype");
  expect_invalid({{data.data(), 2, DType::Float32}}, nullptr, "found_inf is null");
  if (best_cpu_isa() != CpuIsa::Avx2) {
    expect_invalid({{data.data(), 2, DType::Float32}}, &found, "CpuIsa::Avx2 was requested", CpuIsa::Avx2);
  }
  EXPECT_EQ(found, 0.0f);
}

}  // namespace
}  // namespace autocastgen::kernels
