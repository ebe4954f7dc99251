// Per-op statistics (autocastgen/runtime/stats.h) counted by the per-policy drivers: exact counts of
// the nn.Linear example for both states, through the drivers, the generated CPU library
// and a runtime policy; the other policies' ran_in; 8 threads; flush, reset, and an unwritable path;
// cache misses and evictions; the non-finite watch, the range record and record-only mode (watch.h).
#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <autocastgen/runtime/runtime_policy.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/runtime/stats.h>
#include <autocastgen/runtime/watch.h>
#include <autocastgen/torch/policy_call.h>

namespace {

namespace rt = autocastgen::torch;
namespace stats = autocastgen::stats;
using json = nlohmann::json;

// The entry of `op` in the process-wide table (merging this thread first); null when absent.
json entry(const std::string& op) {
  const json table = json::parse(stats::snapshot_json());
  EXPECT_EQ(table.at("version"), 1);
  for (const json& e : table.at("ops"))
    if (e.at("op") == op) return e;
  return nullptr;
}

// nn.Linear(8, 16): weight and bias are float32 leaves that require grad.
struct Linear {
  at::Tensor weight = at::randn({16, 8}).requires_grad_(true);
  at::Tensor bias = at::randn({16}).requires_grad_(true);
};

// torch.autocast("cpu", dtype=bfloat16) from C++: PyTorch's state on, and its cache cleared at the end.
class TorchAutocast {
 public:
  TorchAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~TorchAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  TorchAutocast(const TorchAutocast&) = delete;
  TorchAutocast& operator=(const TorchAutocast&) = delete;
};

template <typename State>
at::Tensor linear_driver(const at::Tensor& x, const Linear& m) {
  const std::optional<at::Tensor> bias = m.bias;
  return rt::lower_precision_fp<State>({at::kCPU, c10::DispatchKey::AutocastCPU, "aten::linear"},
                                       at::_ops::linear::call, x, m.weight, bias);
}

// Note [the linear example]: three calls of one nn.Linear(8, 16) on one 4x8 float32 input,
// bfloat16 autocast. x is not cacheable (no grad): cast every call, 3 x 4*8*2 = 192 bytes. The
// weight and the bias are cast once (16*8*2 = 256 and 16*2 = 32 bytes) and hit the cache on the
// two later calls. So 3 calls, 5 casts, 480 bytes, 4 cache hits (= 2 tensors x (3 calls - 1)).
void expect_linear_example(const json& e, uint64_t scale = 1) {
  ASSERT_FALSE(e.is_null());
  EXPECT_EQ(e.at("policy"), "lower_precision_fp");
  EXPECT_EQ(e.at("calls"), 3 * scale);
  EXPECT_EQ(e.at("ran_in"), json({{"bfloat16", 3 * scale}}));
  EXPECT_EQ(e.at("input_dtypes"), json::array({"float32"}));
  EXPECT_EQ(e.at("casts"), 5 * scale);
  EXPECT_EQ(e.at("cast_bytes"), 480 * scale);
  EXPECT_EQ(e.at("cache_hits"), 4 * scale);
  EXPECT_EQ(e.at("cache_misses"), 2 * scale);  // weight and bias, once each: also casts
  EXPECT_EQ(e.at("cache_evictions"), 0);
  EXPECT_EQ(e.at("outputs_checked"), 0);  // neither the watch nor the range record was on
  EXPECT_TRUE(e.at("output_max_abs").is_null());
  EXPECT_FALSE(e.contains("ranges"));
}

class Stats : public ::testing::Test {
 protected:
  void SetUp() override { stats::reset(); }
};

TEST_F(Stats, OffCountsNothing) {
  ASSERT_FALSE(stats::enabled());
  const Linear m;
  const at::Tensor x = at::randn({4, 8});
  const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
  (void)linear_driver<rt::OwnState>(x, m);
  EXPECT_TRUE(entry("aten::linear").is_null());
}

TEST_F(Stats, LinearExampleOwnState) {
  const stats::StatsScope counting;
  const Linear m;
  const at::Tensor x = at::randn({4, 8});
  {
    const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(linear_driver<rt::OwnState>(x, m).scalar_type(), at::kBFloat16);
  }
  expect_linear_example(entry("aten::linear"));
}

TEST_F(Stats, LinearExampleTorchState) {
  const stats::StatsScope counting;
  const Linear m;
  const at::Tensor x = at::randn({4, 8});
  {
    const TorchAutocast scope;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(linear_driver<rt::TorchState>(x, m).scalar_type(), at::kBFloat16);
  }
  expect_linear_example(entry("aten::linear"));
}

TEST_F(Stats, OwnStateOffCountsNothing) {
  // An OwnState wrapper runs while only torch.autocast is on: autocast does nothing, nothing counted.
  const stats::StatsScope counting;
  const Linear m;
  (void)linear_driver<rt::OwnState>(at::randn({4, 8}), m);
  EXPECT_TRUE(entry("aten::linear").is_null());
}

#ifdef AUTOCASTGEN_CPU_LIBRARY
TEST_F(Stats, LinearExampleGeneratedCpuLibrary) {
  ASSERT_NE(dlopen(AUTOCASTGEN_CPU_LIBRARY, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  const stats::StatsScope counting;
  const Linear m;
  const at::Tensor x = at::randn({4, 8});
  {
    const TorchAutocast scope;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(at::linear(x, m.weight, m.bias).scalar_type(), at::kBFloat16);
  }
  expect_linear_example(entry("aten::linear"));
}
#endif

TEST_F(Stats, LinearExampleRuntimePolicyBothStates) {
  autocastgen::register_runtime_policy("aten::linear", "lower_precision_fp", "cpu");
  const stats::StatsScope counting;
  const Linear m;
  const at::Tensor x = at::randn({4, 8});
  {
    const TorchAutocast scope;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(at::linear(x, m.weight, m.bias).scalar_type(), at::kBFloat16);
  }
  expect_linear_example(entry("aten::linear"));
  {
    // The runtime kernel follows autocastgen's state inside an AutocastScope (own cast cache).
    const c10::impl::IncludeDispatchKeyGuard include(c10::DispatchKey::AutocastCPU);
    const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(at::linear(x, m.weight, m.bias).scalar_type(), at::kBFloat16);
  }
  expect_linear_example(entry("aten::linear"), 2);
  autocastgen::clear_runtime_policies();
}

TEST_F(Stats, RanInOfEachPolicy) {
  const stats::StatsScope counting;
  const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
  const rt::Site site{at::kCPU, c10::DispatchKey::AutocastCPU, "aten::mm"};
  const at::Tensor f32 = at::randn({2, 2});
  const at::Tensor bf16 = f32.to(at::kBFloat16);
  const at::Tensor f64 = f32.to(at::kDouble);
  // fp32: the bfloat16 input cast up (2*2*4 = 16 bytes), the float32 one already there.
  (void)rt::fp32<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "test::fp32"}, at::_ops::mm::call, bf16, f32);
  // lower_precision_fp on float64 inputs: nothing eligible, runs in float64.
  (void)rt::lower_precision_fp<rt::OwnState>(site, at::_ops::mm::call, f64, f64);
  // promote: float32 wins, the bfloat16 input is cast.
  (void)rt::promote<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "test::promote"}, at::_ops::mm::call, bf16,
                                   f32);
  // fp32_set_opt_dtype: dtype filled with float32, nothing cast.
  const std::optional<at::ScalarType> unset;
  (void)rt::fp32_set_opt_dtype<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "test::softmax"},
                                             at::_ops::softmax_int::call, bf16, int64_t{0}, rt::opt_dtype(unset));
  json e = entry("test::fp32");
  EXPECT_EQ(e.at("ran_in"), json({{"float32", 1}}));
  EXPECT_EQ(e.at("input_dtypes"), json::array({"float32", "bfloat16"}));
  EXPECT_EQ(e.at("casts"), 1);
  EXPECT_EQ(e.at("cast_bytes"), 16);
  e = entry("aten::mm");
  EXPECT_EQ(e.at("ran_in"), json({{"float64", 1}}));
  EXPECT_EQ(e.at("casts"), 0);
  e = entry("test::promote");
  EXPECT_EQ(e.at("policy"), "promote");
  EXPECT_EQ(e.at("ran_in"), json({{"float32", 1}}));
  EXPECT_EQ(e.at("casts"), 1);
  e = entry("test::softmax");
  EXPECT_EQ(e.at("policy"), "fp32_set_opt_dtype");
  EXPECT_EQ(e.at("ran_in"), json({{"float32", 1}}));
  EXPECT_EQ(e.at("input_dtypes"), json::array({"bfloat16"}));
  EXPECT_EQ(e.at("casts"), 0);
}

TEST_F(Stats, BannedCountsCallsAndRunsNowhere) {
  const stats::StatsScope counting;
  const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
  const at::Tensor x = at::randn({2, 2});
  EXPECT_THROW((void)rt::banned<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "test::banned"}, "no",
                                              at::_ops::mm::call, x, x),
               c10::Error);
  const json e = entry("test::banned");
  EXPECT_EQ(e.at("calls"), 1);
  EXPECT_EQ(e.at("ran_in"), json::object());
}

TEST_F(Stats, EightThreadsAddUp) {
  const stats::StatsScope counting;
  // Each thread its own module (its own weights, its own per-thread cache) and input, made here:
  // the first at::randn of a thread creates PyTorch's CPU generator inside libtorch, which
  // ThreadSanitizer cannot see synchronised (libtorch is not instrumented).
  const std::vector<Linear> modules(8);
  std::vector<at::Tensor> inputs;
  for (int t = 0; t < 8; ++t) inputs.push_back(at::randn({4, 8}));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&modules, &inputs, t] {
      const Linear& m = modules[static_cast<size_t>(t)];
      const at::Tensor& x = inputs[static_cast<size_t>(t)];
      const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
      for (int i = 0; i < 3; ++i) (void)linear_driver<rt::OwnState>(x, m);
    });  // the thread's counts merge when it ends
  }
  for (std::thread& thread : threads) thread.join();
  expect_linear_example(entry("aten::linear"), 8);
}

TEST_F(Stats, ResetDropsEverything) {
  const stats::StatsScope counting;
  const Linear m;
  const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
  (void)linear_driver<rt::OwnState>(at::randn({4, 8}), m);
  ASSERT_FALSE(entry("aten::linear").is_null());
  stats::reset();
  EXPECT_TRUE(entry("aten::linear").is_null());
}

TEST_F(Stats, FlushWritesTheFile) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "acg_stats_flush.json";
  {
    const stats::StatsScope counting;
    const Linear m;
    const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
    for (int i = 0; i < 3; ++i) (void)linear_driver<rt::OwnState>(at::randn({4, 8}), m);
  }
  ASSERT_TRUE(stats::flush(path.string()));
  std::ifstream in(path);
  const json table = json::parse(in);
  ASSERT_EQ(table.at("ops").size(), 1U);
  EXPECT_EQ(table.at("ops")[0].at("calls"), 3);
  std::filesystem::remove(path);
}

TEST_F(Stats, UnwritablePathWarnsAndReturnsFalse) {
  std::vector<std::string> warnings;
  struct Collect : c10::WarningHandler {
    std::vector<std::string>* out;
    explicit Collect(std::vector<std::string>* o) : out(o) {}
    void process(const c10::Warning& warning) override { out->push_back(warning.msg()); }
  } handler(&warnings);
  const c10::WarningUtils::WarningHandlerGuard guard(&handler);
  EXPECT_FALSE(stats::flush("/nonexistent-autocastgen-dir/stats.json"));
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_NE(warnings[0].find("could not write the statistics to '/nonexistent-autocastgen-dir/stats.json'"),
            std::string::npos)
      << warnings[0];
}

// autocastgen's cache sweeps dead entries when it has doubled (Note [cast cache]): 32 modules made,
// called once and dropped fill it with 64 dead entries (weight and bias each); the 33rd module's
// weight sweeps them all. 40 modules: 80 misses, 64 evictions.
TEST_F(Stats, OwnCacheEvictionsAreCounted) {
  const stats::StatsScope counting;
  const at::Tensor x = at::randn({4, 8});
  {
    const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
    for (int i = 0; i < 40; ++i) {
      const Linear m;
      (void)linear_driver<rt::OwnState>(x, m);
    }
  }
  const json e = entry("aten::linear");
  EXPECT_EQ(e.at("cache_misses"), 80);
  EXPECT_EQ(e.at("cache_hits"), 0);
  EXPECT_EQ(e.at("cache_evictions"), 64);
}

// Note [the overflowing model] (tests/python/insight/test_finite_watch.py): 300s times 300s over 8 terms
// is 720000, above float16's 65504.
struct Overflowing {
  at::Tensor x = at::full({2, 8}, 300.0);
  at::Tensor w = at::full({8, 4}, 300.0);
};

at::Tensor mm_driver(const Overflowing& m) {
  return rt::lower_precision_fp<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "aten::mm"},
                                              at::_ops::mm::call, m.x, m.w);
}

TEST_F(Stats, WatchRecordsTheFirstNonFiniteOutput) {
  const stats::FiniteWatch watch(stats::FiniteMode::record);
  const Overflowing m;
  const autocastgen::AutocastScope scope(at::kCPU, at::kHalf);
  EXPECT_TRUE(mm_driver(m).isinf().all().item<bool>());
  (void)mm_driver(m);
  const json e = entry("aten::mm");
  EXPECT_EQ(e.at("outputs_checked"), 2);
  EXPECT_EQ(e.at("nonfinite"), 2);
  EXPECT_TRUE(e.at("output_max_abs").is_null());
  // From C++: no Python line.
  EXPECT_EQ(stats::first_nonfinite(),
            "autocastgen: non-finite output: aten::mm (rule lower_precision_fp, ran in float16) returned inf in output 0 "
            "(float16 [2, 4]); inputs: float16 [2, 8] max |x| 300, float16 [8, 4] max |x| 300");
}

TEST_F(Stats, WatchRaisesInRaiseMode) {
  const stats::FiniteWatch watch(stats::FiniteMode::raise);
  const Overflowing m;
  const autocastgen::AutocastScope scope(at::kCPU, at::kHalf);
  try {
    (void)mm_driver(m);
    ADD_FAILURE() << "raise mode did not raise";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.msg()).find("non-finite output: aten::mm"), std::string::npos) << error.msg();
  }
  EXPECT_EQ(stats::finite_mode(), stats::FiniteMode::raise);
}

TEST_F(Stats, WatchIsOffAfterItsScope) {
  { const stats::FiniteWatch watch(stats::FiniteMode::warn); }
  EXPECT_EQ(stats::finite_mode(), stats::FiniteMode::off);
  EXPECT_EQ(stats::detail::active(), 0U);
}

TEST_F(Stats, RecordOnlyCastsNothingAndRecordsRanges) {
  const Overflowing m;
  {
    const stats::RecordScope recording;
    const autocastgen::AutocastScope scope(at::kCPU, at::kHalf);
    const at::Tensor y = mm_driver(m);
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    EXPECT_EQ(y.max().item<double>(), 720000.0);
  }
  const json e = entry("aten::mm");
  EXPECT_EQ(e.at("ran_in"), json({{"float32", 1}}));
  EXPECT_EQ(e.at("casts"), 0);
  EXPECT_EQ(e.at("output_max_abs"), 720000.0);
  const json& r = e.at("ranges");
  EXPECT_EQ(r.at("input_max_abs"), 300.0);
  EXPECT_EQ(r.at("output_elements"), 8);
  EXPECT_EQ(r.at("float16_overflow"), 8);
  EXPECT_EQ(r.at("bfloat16_overflow"), 0);
  EXPECT_EQ(stats::detail::active(), 0U);
}

TEST_F(Stats, RangesCountUnderflowWhileCasting) {
  // bfloat16 products of 1e-5 * 1e-5 * 2 terms = 2e-10: below float16's smallest subnormal, within
  // bfloat16's range.
  const stats::RangeScope ranges;
  const at::Tensor a = at::full({2, 2}, 1e-5);
  const autocastgen::AutocastScope scope(at::kCPU, at::kBFloat16);
  EXPECT_EQ(rt::lower_precision_fp<rt::OwnState>({at::kCPU, c10::DispatchKey::AutocastCPU, "aten::mm"},
                                                 at::_ops::mm::call, a, a)
                .scalar_type(),
            at::kBFloat16);
  const json r = entry("aten::mm").at("ranges");
  EXPECT_EQ(r.at("output_elements"), 4);
  EXPECT_EQ(r.at("float16_underflow"), 4);
  EXPECT_EQ(r.at("bfloat16_underflow"), 0);
  EXPECT_EQ(r.at("float16_overflow"), 0);
}

}  // namespace
