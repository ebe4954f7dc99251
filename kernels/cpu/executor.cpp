// Executors for the CPU kernel when no framework thread pool is given: serial and std::thread.
#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "autocastgen/kernels/scaler_cpu.h"

namespace autocastgen::kernels {
namespace {

class SerialExecutor final : public Executor {
 public:
  std::int64_t workers_for(std::int64_t) const override { return 1; }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    for (std::int64_t w = 0; w < workers; ++w) body(w);
  }
};

class ThreadExecutor final : public Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    // Starting a thread costs tens of microseconds, so each one gets at least this much work.
    constexpr std::int64_t kMinPerThread = std::int64_t{1} << 19;
    const std::int64_t hw = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
    return std::clamp<std::int64_t>(elements / kMinPerThread, 1, hw);
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    if (workers <= 1) {
      if (workers == 1) body(0);
      return;
    }
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
    const auto guarded = [&](std::int64_t w) {
      try {
        body(w);
      } catch (...) {
        errors[static_cast<std::size_t>(w)] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(workers - 1));
    for (std::int64_t w = 1; w < workers; ++w) threads.emplace_back(guarded, w);
    guarded(0);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }
};

}  // namespace

const Executor& serial_executor() {
  static const SerialExecutor executor;
  return executor;
}

const Executor& thread_executor() {
  static const ThreadExecutor executor;
  return executor;
}

}  // namespace autocastgen::kernels
