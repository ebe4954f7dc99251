// 16-thread stress test of autocastgen's thread-local autocast state and cast cache
// (runtime/include/autocastgen/runtime/state.h, cast_cache.h) on real CPU tensors.
//
// Waves of short-lived threads, each with its own state (bfloat16 or float16, cache on or off,
// nested scopes including enabled = false inside enabled), cast a set of weights SHARED by all
// threads (float32 leaves that require grad, made on the main thread) through
// autocastgen::cached_cast, and check every result against a cast made beforehand. Threads also
// carry their state into sub-threads (with_autocast_state, AutocastStateGuard) and create and drop
// their own weights inside scopes. The point of the test is as much the sanitizer builds (presets
// tsan and asan-torch, tests/stress/CMakeLists.txt) as its own checks.
//
// Checks on worker threads do not use gtest macros: failures are collected (under a mutex) and
// reported by the main thread, so the test does not depend on gtest's own thread safety.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "autocastgen/runtime/cast_cache.h"
#include "autocastgen/runtime/state.h"

namespace {

constexpr c10::DeviceType kCPU = c10::DeviceType::CPU;
constexpr int kThreads = 16;

// Waves of 16 threads; each thread opens kRoundsPerThread outermost scopes. About 2 s in a
// Release build. Sanitizer builds run 5-20x slower and get fewer waves (every wave still runs all
// 16 threads and every code path). AUTOCASTGEN_STRESS_WAVES=N overrides the count (soak runs).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define AUTOCASTGEN_STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define AUTOCASTGEN_STRESS_SANITIZED 1
#endif
#endif
#ifdef AUTOCASTGEN_STRESS_SANITIZED
constexpr int kDefaultWaves = 16;
#else
constexpr int kDefaultWaves = 60;
#endif
constexpr int kRoundsPerThread = 3;

int waves() {
  const char* env = std::getenv("AUTOCASTGEN_STRESS_WAVES");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : kDefaultWaves;
}

using autocastgen::AutocastScope;
using autocastgen::autocast_dtype;
using autocastgen::autocast_nesting;
using autocastgen::cast_cache_size;
using autocastgen::cached_cast;
using autocastgen::is_autocast_cache_enabled;
using autocastgen::is_autocast_enabled;

c10::ScalarType other_dtype(c10::ScalarType dtype) {
  return dtype == at::kBFloat16 ? at::kHalf : at::kBFloat16;
}

// Failures seen on any thread; the main thread turns them into gtest failures.
class Failures {
 public:
  void add(std::string message) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++count_;
    if (messages_.size() < 30) messages_.push_back(std::move(message));
  }
  void report() {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::string all;
    for (const std::string& m : messages_) all += "  " + m + "\n";
    EXPECT_EQ(count_, 0U) << "failed checks (first " << messages_.size() << "):\n" << all;
  }

 private:
  std::mutex mutex_;
  size_t count_ = 0;
  std::vector<std::string> messages_;
};

// One thread's checks: `who` names the thread in messages.
class Checker {
 public:
  Checker(Failures& failures, std::string who) : failures_(failures), who_(std::move(who)) {}
  bool check(bool ok, const std::string& what) {
    if (!ok) failures_.add(who_ + ": " + what);
    return ok;
  }
  // The same with the message joined only on a failure (the hot loops check thousands of times).
  bool check(bool ok, const char* where, const char* what) {
    if (!ok) failures_.add(who_ + ": " + where + ": " + what);
    return ok;
  }
  // The thread's whole state for CPU is exactly this.
  void state_is(bool enabled, c10::ScalarType dtype, uint32_t nesting, bool cache, const char* where) {
    std::ostringstream got;
    got << "enabled=" << is_autocast_enabled(kCPU) << " dtype=" << autocast_dtype(kCPU)
        << " nesting=" << autocast_nesting(kCPU) << " cache=" << is_autocast_cache_enabled(kCPU);
    std::ostringstream want;
    want << "enabled=" << enabled << " dtype=" << dtype << " nesting=" << nesting << " cache=" << cache;
    check(got.str() == want.str(), std::string(where) + ": state " + got.str() + ", expected " + want.str());
  }
  void cache_size_is(size_t expected, const char* where) {
    const size_t size = cast_cache_size(kCPU);
    check(size == expected, std::string(where) + ": cast_cache_size " + std::to_string(size) + ", expected " +
                                std::to_string(expected));
  }
  // `cast` is `source` cast to `dtype`, value for value.
  bool cast_is(const at::Tensor& cast, const at::Tensor& expected, c10::ScalarType dtype, const char* where) {
    if (!check(cast.defined(), std::string(where) + ": undefined result")) return false;
    if (!check(cast.scalar_type() == dtype, std::string(where) + ": dtype " + std::string(c10::toString(cast.scalar_type())) +
                                                ", expected " + c10::toString(dtype)))
      return false;
    return check(cast.sizes() == expected.sizes() && at::equal(cast, expected), std::string(where) + ": wrong values");
  }

 private:
  Failures& failures_;
  std::string who_;
};

// The shared weights and their expected casts, made on the main thread before any worker starts
// (thread creation orders them before every use).
struct Weights {
  std::vector<at::Tensor> w;    // float32 leaves, requires_grad: what the cache keeps
  std::vector<at::Tensor> bf16;  // w[i].detach().to(bfloat16)
  std::vector<at::Tensor> fp16;  // w[i].detach().to(float16)
  at::Tensor no_grad;            // float32 without requires_grad: cast, never cached
  at::Tensor no_grad_bf16, no_grad_fp16;
  at::Tensor float64;            // not eligible: returned as is
  at::Tensor int64;              // not eligible: returned as is

  explicit Weights(int64_t seed) {
    at::manual_seed(static_cast<uint64_t>(seed));
    const std::vector<std::vector<int64_t>> shapes = {{7}, {3, 5}, {64}, {16, 16}, {2, 3, 4}, {1}, {33, 3}, {128}};
    for (const auto& shape : shapes) {
      at::Tensor t = at::randn(shape).mul_(100.0).set_requires_grad(true);
      bf16.push_back(t.detach().to(at::kBFloat16));
      fp16.push_back(t.detach().to(at::kHalf));
      w.push_back(std::move(t));
    }
    no_grad = at::randn({9});
    no_grad_bf16 = no_grad.to(at::kBFloat16);
    no_grad_fp16 = no_grad.to(at::kHalf);
    float64 = at::randn({5}, at::kDouble).set_requires_grad(true);
    int64 = at::arange(6);
  }
  [[nodiscard]] const at::Tensor& expected(size_t i, c10::ScalarType dtype) const {
    return dtype == at::kBFloat16 ? bf16[i] : fp16[i];
  }
};

// Casts every shared weight to `dtype` and checks values; with `cached`, also that a second cast
// returns the very same tensor (and without, that it does not).
std::vector<at::Tensor> cast_all(Checker& c, const Weights& weights, c10::ScalarType dtype, bool cached,
                                 const char* where) {
  std::vector<at::Tensor> casts;
  for (size_t i = 0; i < weights.w.size(); ++i) {
    at::Tensor first = cached_cast(dtype, weights.w[i], kCPU);
    c.cast_is(first, weights.expected(i, dtype), dtype, where);
    c.check(first.requires_grad(), std::string(where) + ": the cast of a weight must record autograd history");
    at::Tensor second = cached_cast(dtype, weights.w[i], kCPU);
    c.cast_is(second, weights.expected(i, dtype), dtype, where);
    c.check(second.is_same(first) == cached, std::string(where) + (cached ? ": second cast is not the cached one"
                                                                          : ": cast cached although it must not be"));
    casts.push_back(std::move(first));
  }
  return casts;
}

// Inputs the cache must never keep: no requires_grad, a view, a non-leaf, float64, int64.
void cast_uncacheable(Checker& c, const Weights& weights, c10::ScalarType dtype, const char* where) {
  const size_t before = cast_cache_size(kCPU);
  const at::Tensor& expected_no_grad = dtype == at::kBFloat16 ? weights.no_grad_bf16 : weights.no_grad_fp16;
  c.cast_is(cached_cast(dtype, weights.no_grad, kCPU), expected_no_grad, dtype, where);
  at::Tensor view = weights.w[3].select(0, 2);  // a view of a weight
  c.cast_is(cached_cast(dtype, view, kCPU), weights.expected(3, dtype).select(0, 2), dtype, where);
  at::Tensor non_leaf = weights.w[0] * 1.0F;
  c.cast_is(cached_cast(dtype, non_leaf, kCPU), weights.expected(0, dtype), dtype, where);
  c.check(cached_cast(dtype, weights.float64, kCPU).is_same(weights.float64), std::string(where) + ": float64 was cast");
  c.check(cached_cast(dtype, weights.int64, kCPU).is_same(weights.int64), std::string(where) + ": int64 was cast");
  {
    const c10::InferenceMode inference;
    c.cast_is(cached_cast(dtype, weights.w[1], kCPU), weights.expected(1, dtype), dtype, where);
  }
  c.cache_size_is(before, where);
}

// Weights made and dropped inside the scope, one after another: their TensorImpls are likely to
// land at the same address, and a cache keyed on stale addresses would return an old cast.
void churn_local_weights(Checker& c, c10::ScalarType dtype, bool cache, int tag, const char* where) {
  const size_t before = cast_cache_size(kCPU);
  for (int k = 0; k < 24; ++k) {
    const float value = static_cast<float>(tag * 64 + k) + 0.5F;
    at::Tensor local = at::full({k % 3 == 0 ? 4 : 17}, value).set_requires_grad(true);
    at::Tensor cast = cached_cast(dtype, local, kCPU);
    if (!c.cast_is(cast, local.detach().to(dtype), dtype, where)) return;
    if (cache) c.check(cached_cast(dtype, local, kCPU).is_same(cast), where, "local weight not cached");
  }
  // Dead entries may linger until swept, but never more than one per local weight.
  c.check(cast_cache_size(kCPU) <= before + 24, where, "cache grew past the weights made");
}

// A sub-thread started with with_autocast_state: sees exactly the captured state, casts through
// its own cache, and leaves no state and no cache behind.
void run_carried(Failures& failures, const Weights& weights, const std::string& who, bool enabled, c10::ScalarType dtype,
                 uint32_t nesting, bool cache) {
  auto task = autocastgen::with_autocast_state([&failures, &weights, who, enabled, dtype, nesting, cache](int arg) {
    Checker c(failures, who + "/carried");
    c.state_is(enabled, dtype, nesting, cache, "inside with_autocast_state");
    cast_all(c, weights, dtype, cache, "carried cast");
    c.cache_size_is(cache ? weights.w.size() : 0, "carried cache");
    return arg + 1;
  });
  std::thread sub([&failures, who, task = std::move(task)]() mutable {
    Checker c(failures, who + "/carried");
    c.state_is(false, at::kBFloat16, 0, true, "fresh thread");
    c.check(task(41) == 42, "with_autocast_state lost the return value");
    c.state_is(false, at::kBFloat16, 0, true, "after with_autocast_state");
    c.cache_size_is(0, "after with_autocast_state");
  });
  sub.join();
}

// A pool-like thread with its own scope (the other dtype) runs a task under another thread's
// captured state (AutocastStateGuard), then goes on with its own: neither sees the other's casts.
void run_pool_thread(Failures& failures, const Weights& weights, const std::string& who,
                     const autocastgen::AutocastState& borrowed) {
  std::thread pool([&failures, &weights, &borrowed, who] {
    Checker c(failures, who + "/pool");
    const autocastgen::DeviceAutocastState& b = borrowed.device(kCPU);
    const c10::ScalarType borrowed_dtype = b.dtype;
    const c10::ScalarType own = other_dtype(borrowed_dtype);
    {
      const AutocastScope scope(kCPU, own);
      const std::vector<at::Tensor> own_casts = cast_all(c, weights, own, true, "pool own cast");
      {
        const autocastgen::AutocastStateGuard guard(borrowed);
        c.state_is(b.enabled, borrowed_dtype, b.nesting, b.cache_enabled, "pool under guard");
        cast_all(c, weights, borrowed_dtype, b.cache_enabled, "pool borrowed cast");
      }
      c.state_is(true, own, 1, true, "pool after guard");
      for (size_t i = 0; i < weights.w.size(); ++i) {
        at::Tensor again = cached_cast(own, weights.w[i], kCPU);
        c.cast_is(again, weights.expected(i, own), own, "pool own cast after guard");
        c.check(again.is_same(own_casts[i]), "pool lost its own cached cast under the guard");
      }
    }
    c.state_is(false, at::kBFloat16, 0, true, "pool after scope");
    c.cache_size_is(0, "pool after scope");
  });
  pool.join();
}

// One worker: kRoundsPerThread outermost scopes, with nested scopes and sub-threads inside.
void run_worker(Failures& failures, const Weights& weights, int id, int wave) {
  const std::string who = "wave " + std::to_string(wave) + " thread " + std::to_string(id);
  Checker c(failures, who);
  const c10::ScalarType dtype = id % 2 == 0 ? at::kBFloat16 : at::kHalf;
  const bool cache = (id / 2) % 2 == 0;
  c.state_is(false, at::kBFloat16, 0, true, "new thread");
  c.cache_size_is(0, "new thread");

  for (int round = 0; round < kRoundsPerThread; ++round) {
    {
      const AutocastScope outer(kCPU, AutocastScope::Options{dtype, true, cache});
      c.state_is(true, dtype, 1, cache, "outer scope");
      const std::vector<at::Tensor> casts = cast_all(c, weights, dtype, cache, "outer cast");
      c.cache_size_is(cache ? weights.w.size() : 0, "outer scope");
      // The other dtype is not this thread's lower-precision dtype: cast, not cached.
      cast_all(c, weights, other_dtype(dtype), false, "outer cast to the other dtype");
      cast_uncacheable(c, weights, dtype, "outer uncacheable");

      {  // enabled = false inside enabled: dtype inherited, casts still correct, cache kept.
        const AutocastScope off(kCPU, AutocastScope::Options{std::nullopt, false, cache});
        c.state_is(false, dtype, 2, cache, "disabled inner scope");
        for (size_t i = 0; i < weights.w.size(); ++i)
          c.cast_is(cached_cast(dtype, weights.w[i], kCPU), weights.expected(i, dtype), dtype, "disabled inner cast");
        if ((id + round) % 4 == 0) {
          // AutocastStateGuard on a fresh thread: the captured disabled state, exactly.
          const autocastgen::AutocastState captured = autocastgen::capture_autocast_state();
          std::thread sub([&failures, &captured, who, dtype, cache] {
            Checker sc(failures, who + "/guarded");
            {
              const autocastgen::AutocastStateGuard guard(captured);
              sc.state_is(false, dtype, 2, cache, "guard of a disabled scope");
            }
            sc.state_is(false, at::kBFloat16, 0, true, "after guard");
          });
          sub.join();
        }
      }
      c.state_is(true, dtype, 1, cache, "after disabled inner scope");
      if (cache) {
        for (size_t i = 0; i < weights.w.size(); ++i)
          c.check(cached_cast(dtype, weights.w[i], kCPU).is_same(casts[i]), "inner scope end dropped the outer cache");
      }

      {  // A nested enabled scope with the other dtype and the cache forced on.
        const c10::ScalarType inner_dtype = other_dtype(dtype);
        const AutocastScope inner(kCPU, AutocastScope::Options{inner_dtype, true, true});
        c.state_is(true, inner_dtype, 2, true, "nested scope, other dtype");
        cast_all(c, weights, inner_dtype, true, "nested cast, other dtype");
        // The outer dtype's casts are not the nested scope's lower-precision dtype: not cached.
        const size_t size = cast_cache_size(kCPU);
        for (size_t i = 0; i < weights.w.size(); ++i)
          c.cast_is(cached_cast(dtype, weights.w[i], kCPU), weights.expected(i, dtype), dtype, "nested cast, outer dtype");
        c.cache_size_is(size, "nested scope, outer dtype");
        if (round == 0) run_carried(failures, weights, who, true, inner_dtype, 2, true);
      }
      c.state_is(true, dtype, 1, cache, "after nested scope");

      try {  // a rejected scope leaves the state as it was
        const AutocastScope bad(kCPU, at::kFloat);
        c.check(false, "a float32 scope was accepted");
      } catch (const c10::Error&) {
      }
      c.state_is(true, dtype, 1, cache, "after a rejected scope");

      churn_local_weights(c, dtype, cache, id * 16 + round, "local weights");
      if (round == 1) run_carried(failures, weights, who, true, dtype, 1, cache);
      if (id % 4 == 1 && round == 0) run_pool_thread(failures, weights, who, autocastgen::capture_autocast_state());
    }
    c.state_is(false, at::kBFloat16, 0, true, "after outermost scope");
    c.cache_size_is(0, "after outermost scope");
  }
}

// Starts all threads of a wave together: they hit the cache code at the same time.
class StartGate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return open_; });
  }
  void open() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(RuntimeStress, SixteenThreadsShareWeights) {
  Failures failures;
  Checker main_checker(failures, "main");
  const int wave_count = waves();
  for (int wave = 0; wave < wave_count; ++wave) {
    // The main thread has its own scope too, and the weights live only inside it: its cache
    // holds casts of weights that are dropped before the scope ends.
    {
      const AutocastScope main_scope(kCPU, at::kBFloat16);
      auto weights = std::make_unique<Weights>(wave);
      cast_all(main_checker, *weights, at::kBFloat16, true, "main cast");
      StartGate gate;
      std::vector<std::thread> threads;
      threads.reserve(kThreads);
      for (int id = 0; id < kThreads; ++id) {
        threads.emplace_back([&failures, &weights, &gate, id, wave] {
          gate.wait();
          run_worker(failures, *weights, id, wave);
        });
      }
      gate.open();
      for (std::thread& t : threads) t.join();
      main_checker.cache_size_is(weights->w.size(), "main after wave");
      weights.reset();  // drops the weights while the main scope still has their casts
      main_checker.state_is(true, at::kBFloat16, 1, true, "main scope");
    }
    main_checker.state_is(false, at::kBFloat16, 0, true, "main after scope");
    main_checker.cache_size_is(0, "main after scope");
  }
  failures.report();
}

// Bare std::threads that never open a scope of their own run one cast under the state carried in
// by with_autocast_state and exit: the guard must leave them with no state and no cache entries.
TEST(RuntimeStress, ShortLivedThreadsWithCarriedState) {
  Failures failures;
  const Weights weights(1000);
  const int wave_count = waves();
  for (int wave = 0; wave < wave_count; ++wave) {
    const c10::ScalarType dtype = wave % 2 == 0 ? at::kHalf : at::kBFloat16;
    const AutocastScope scope(kCPU, dtype);
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int id = 0; id < kThreads; ++id) {
      const std::string who = "short-lived wave " + std::to_string(wave) + " thread " + std::to_string(id);
      auto task = autocastgen::with_autocast_state([&failures, &weights, who, dtype, id] {
        Checker c(failures, who);
        c.state_is(true, dtype, 1, true, "carried into std::thread");
        const size_t i = static_cast<size_t>(id) % weights.w.size();
        at::Tensor cast = cached_cast(dtype, weights.w[i], kCPU);
        c.cast_is(cast, weights.expected(i, dtype), dtype, "short-lived cast");
        c.check(cached_cast(dtype, weights.w[i], kCPU).is_same(cast), "short-lived cast not cached");
        c.cache_size_is(1, "short-lived cache");
      });
      threads.emplace_back([&failures, who, task = std::move(task)]() mutable {
        task();
        Checker c(failures, who);
        c.state_is(false, at::kBFloat16, 0, true, "after the carried task");
        c.cache_size_is(0, "after the carried task");
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(cast_cache_size(kCPU), 0U);  // the main thread cast nothing
  }
  EXPECT_FALSE(is_autocast_enabled(kCPU));
  failures.report();
}

}  // namespace
