// Executors for the CPU kernel when no framework thread pool is given: serial, and a persistent pool.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
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

// Note [worker pool]
// The pool's threads are started once, on the first parallel call, and then sleep on a condition
// variable between calls, so a call pays a wake-up (microseconds) rather than thread starts.
// A call publishes a Job whose worker slots are claimed from an atomic counter, by the woken
// helpers and by the calling thread alike. When the caller runs out of slots it closes the job to
// newcomers and waits only for helpers that already joined: a helper that is still waiting for a
// core (the machine is busy) is not waited for, and the caller runs its slots itself. With the
// kernel's dynamic pieces (Note [dynamic pieces] in scaler_cpu.cpp) a late slot finds no work left.
// One job runs at a time: a second concurrent caller, or a nested call from inside a body, runs
// its slots on its own thread instead of queueing behind the first (no deadlock, no waiting).
// After fork() the child's pool has no threads; a pool remembers its process and a child builds
// a new one (the old one is left alone, its mutex may be in any state).
class Pool {
 public:
  static Pool& instance() {
    static std::mutex create;
    static Pool* pool = nullptr;
    const std::lock_guard<std::mutex> lock(create);
    if (pool == nullptr || pool->pid_ != ::getpid()) {
      pool = new Pool();  // never deleted: helpers may sleep in it until the process ends
    }
    return *pool;
  }

  // Read once: std::thread::hardware_concurrency() reads a file under /sys on every call.
  static std::int64_t hardware_threads() {
    static const std::int64_t threads = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
    return threads;
  }

  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) {
    Job job(body, workers);
    const std::int64_t helpers = std::min<std::int64_t>(workers - 1, helpers_);
    if (helpers <= 0 || busy_.exchange(true, std::memory_order_acquire)) {
      job.drain();  // one worker wanted, or the pool is in use (a concurrent or nested call)
      job.rethrow();
      return;
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      ++generation_;
    }
    for (std::int64_t h = 0; h < helpers; ++h) wake_.notify_one();
    job.drain();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      job_ = nullptr;  // no helper joins from now on
      idle_.wait(lock, [&] { return job.joined == 0; });
    }
    busy_.store(false, std::memory_order_release);
    job.rethrow();
  }

 private:
  struct Job {
    Job(const std::function<void(std::int64_t)>& body, std::int64_t workers)
        : body(body), workers(workers), errors(static_cast<std::size_t>(workers)) {}
    // Runs unclaimed slots until none is left; each body's exception is kept for rethrow().
    void drain() {
      for (std::int64_t w = next.fetch_add(1, std::memory_order_relaxed); w < workers;
           w = next.fetch_add(1, std::memory_order_relaxed)) {
        try {
          body(w);
        } catch (...) {
          errors[static_cast<std::size_t>(w)] = std::current_exception();
        }
      }
    }
    void rethrow() const {
      for (const std::exception_ptr& e : errors) {
        if (e) std::rethrow_exception(e);
      }
    }
    const std::function<void(std::int64_t)>& body;
    const std::int64_t workers;
    std::atomic<std::int64_t> next{0};
    std::vector<std::exception_ptr> errors;
    int joined = 0;  // helpers inside drain(), guarded by Pool::mutex_
  };

  Pool() : pid_(::getpid()), helpers_(hardware_threads() - 1) {
    for (std::int64_t h = 0; h < helpers_; ++h) std::thread([this] { helper_loop(); }).detach();
  }

  void helper_loop() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return job_ != nullptr && generation_ != seen; });
      seen = generation_;
      Job* job = job_;
      ++job->joined;
      lock.unlock();
      job->drain();
      lock.lock();
      if (--job->joined == 0) idle_.notify_one();
    }
  }

  const pid_t pid_;
  const std::int64_t helpers_;  // threads, detached: they live as long as the process
  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::condition_variable wake_;  // helpers wait here for a job
  std::condition_variable idle_;  // the caller waits here for joined helpers to leave
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
};

class PoolExecutor final : public Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    // Waking a helper costs a few microseconds; each one gets at least ~100 us of streaming.
    constexpr std::int64_t kMinPerWorker = std::int64_t{1} << 18;
    return std::clamp<std::int64_t>(elements / kMinPerWorker, 1, Pool::hardware_threads());
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    if (workers <= 1) {
      if (workers == 1) body(0);
      return;
    }
    Pool::instance().run(workers, body);
  }
};

}  // namespace

const Executor& serial_executor() {
  static const SerialExecutor executor;
  return executor;
}

const Executor& thread_executor() {
  static const PoolExecutor executor;
  return executor;
}

}  // namespace autocastgen::kernels
