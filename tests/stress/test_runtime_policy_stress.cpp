// 16-thread stress test of runtime policies (runtime_policy.h) registered, replaced and cleared
// while other threads call the op: the crash of issue 19, finding 1.
//
// Each of 16 threads, 200 times: gives an op the runtime policy fp32 or lower_precision_fp on cpu
// (threads disagree, so the op's policy is replaced all the time), calls it under autocast, and
// every 10th iteration clears every runtime policy. The op is acg_stress::tanh, defined here
// (registering a policy for an aten op reads every aten schema, ~25 ms; the aten::tanh
// runs too, with fewer iterations). Even threads use
// PyTorch's state (at::autocast, as torch.autocast), odd ones autocastgen's (AutocastScope). Each
// result must be what one of the policies (or no policy) gives: float32 or bfloat16, with tanh's
// values. Before the fix (Note [replacing a runtime policy while it runs]) this died with SIGSEGV
// in RuntimePolicyKernel::operator() within seconds; its point is as much the sanitizer builds
// (presets tsan and asan-torch, tests/stress/CMakeLists.txt) as its own checks.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <functional>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autocastgen/runtime/runtime_policy.h"
#include "autocastgen/runtime/state.h"

TORCH_LIBRARY(acg_stress, m) { m.def("tanh(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(acg_stress, CPU, m) {
  m.impl("tanh", [](const at::Tensor& x) { return at::tanh(x); });
}

namespace {

constexpr int kThreads = 16;

// 200 iterations a thread, as in the reproduction. Sanitizer builds run 5-20x slower and
// get fewer; AUTOCASTGEN_STRESS_ITERATIONS=N overrides (soak runs).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define AUTOCASTGEN_STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define AUTOCASTGEN_STRESS_SANITIZED 1
#endif
#endif
#ifdef AUTOCASTGEN_STRESS_SANITIZED
constexpr int kDefaultIterations = 30;
#else
constexpr int kDefaultIterations = 200;
#endif

int iterations() {
  const char* env = std::getenv("AUTOCASTGEN_STRESS_ITERATIONS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : kDefaultIterations;
}

// Failures seen on worker threads, reported by the main thread (gtest macros stay on it).
class Failures {
 public:
  void add(const std::string& message) {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++count_;
    if (messages_.size() < 20) messages_.push_back(message);
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

at::Tensor call(const std::string& op, const at::Tensor& x) {
  if (op == "aten::tanh") return at::tanh(x);
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("acg_stress::tanh", "").typed<at::Tensor(const at::Tensor&)>();
  return handle.call(x);
}

// Clears happen between waves of 10 iterations, while no thread calls: unregistering a kernel
// rewrites the op's dispatch-table entry, which PyTorch's callers read without a lock, and a call
// racing with it can run the key's fallthrough kernel, which PyTorch aborts ("fallthrough_kernel was
// executed"). Registering and replacing while other threads call is what this test stresses.
void worker(const std::string& op, int index, int count, const at::Tensor& x, const at::Tensor& expected,
            Failures& failures, std::atomic<int>& calls, std::barrier<std::function<void()>>& wave) {
  const bool torch_state = index % 2 == 0;
  for (int i = 0; i < count; ++i) {
    const char* policy = (index + i) % 2 == 0 ? "fp32" : "lower_precision_fp";
    try {
      autocastgen::register_runtime_policy(op, policy, "cpu");
      at::Tensor y;
      if (torch_state) {
        at::autocast::set_autocast_enabled(at::kCPU, true);
        y = call(op, x);
        at::autocast::set_autocast_enabled(at::kCPU, false);
        at::autocast::clear_cache();
      } else {
        const autocastgen::AutocastScope scope(c10::DeviceType::CPU, at::kBFloat16);
        y = call(op, x);
      }
      calls.fetch_add(1, std::memory_order_relaxed);
      const std::string who = "thread " + std::to_string(index) + " iteration " + std::to_string(i) + ": ";
      if (y.scalar_type() != at::kFloat && y.scalar_type() != at::kBFloat16)
        failures.add(who + "dtype " + c10::toString(y.scalar_type()));
      else if (!at::allclose(y.to(at::kFloat), expected, /*rtol=*/1e-2, /*atol=*/1e-2))
        failures.add(who + "wrong values");
    } catch (const c10::Error& error) {
      failures.add("thread " + std::to_string(index) + ": " + error.what_without_backtrace());
    }
    if (i % 10 == 9) wave.arrive_and_wait();  // the last to arrive clears
  }
}

void register_replace_and_clear_while_calling(const std::string& op, int count) {
  const at::Tensor x = at::linspace(-3, 3, 64, at::kFloat);
  const at::Tensor expected = at::tanh(x);
  Failures failures;
  std::atomic<int> calls{0};
  std::barrier<std::function<void()>> wave(kThreads, std::function<void()>([] { autocastgen::clear_runtime_policies(); }));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { worker(op, t, count, x, expected, failures, calls, wave); });
  for (std::thread& thread : threads) thread.join();
  failures.report();
  EXPECT_EQ(calls.load(), kThreads * count);
  autocastgen::clear_runtime_policies();
  at::autocast::set_autocast_enabled(at::kCPU, true);
  EXPECT_EQ(call(op, x).scalar_type(), at::kFloat) << "no policy is left after the last clear";
  at::autocast::set_autocast_enabled(at::kCPU, false);
}

TEST(RuntimePolicyStress, RegisterReplaceAndClearWhileCalling) {
  register_replace_and_clear_while_calling("acg_stress::tanh", iterations());
}

// The reproduction on aten::tanh itself (each registration reads the aten schemas).
TEST(RuntimePolicyStress, RegisterReplaceAndClearAtenTanhWhileCalling) {
  register_replace_and_clear_while_calling("aten::tanh", std::max(iterations() / 20, 2));
}

// A banned runtime policy raises its message in every thread while others replace it.
TEST(RuntimePolicyStress, BannedMessageSurvivesReplacement) {
  const at::Tensor x = at::ones({4}, at::kFloat);
  Failures failures;
  std::vector<std::thread> threads;
  const std::string message = "tanh is banned here";
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        try {
          autocastgen::register_runtime_policy("acg_stress::tanh", t % 2 == 0 ? "banned" : "fp32", "cpu",
                                               t % 2 == 0 ? message : "");
          const autocastgen::AutocastScope scope(c10::DeviceType::CPU, at::kBFloat16);
          (void)call("acg_stress::tanh", x);
        } catch (const c10::Error& error) {
          const std::string text = error.what_without_backtrace();
          if (text != message) failures.add(text);  // raised exactly as written
        }
      }
    });
  for (std::thread& thread : threads) thread.join();
  failures.report();
  autocastgen::clear_runtime_policies();
}

}  // namespace
