// autocastgen's runtime (thread-local autocast state, cast cache, runtime policies) against what
// PyTorch does for the same work, every baseline measured in the same process, alternating with
// the measurement it is compared to. bench/runtime_ratios.py runs this binary a few times and
// prints the ratio tables; see bench/README.md.
//
//   hit      ns per cache hit: autocastgen::cached_cast inside an AutocastScope against
//            at::autocast::cached_cast with PyTorch's CPU autocast on (one fp32 weight that
//            requires grad, cached before timing).
//   threads  aggregate hits/s with 1, 2, 4, 8 ... threads hitting the cache for the same 16
//            shared weights, round robin, for a fixed time: ours (one cache per thread, no lock)
//            against PyTorch's (one map behind a mutex).
//   boxed    ns per at::mm call on small fp32 CPU tensors under bf16 autocast: through the
//            generated wrapper (libautocastgen_torch_cpu.so, driven by at::autocast), against the
//            runtime-policy boxed kernel (register_runtime_policy("aten::mm",
//            "lower_precision_fp", "cpu")) under the same at::autocast state, and the same boxed
//            kernel driven by an AutocastScope.
//
// Every measurement checks that it ran what it claims (the cache hit returns the cached tensor;
// each boxed/unboxed batch bumps wrapper_trace() once per call, from the kernel it names) and the
// binary exits 1 with "bench_runtime: FAILED: ..." otherwise. Output: one JSON object on stdout
// holding every repetition's sample (the driver takes the medians).
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <autocastgen/runtime/cast_cache.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>
#include <autocastgen/runtime/runtime_policy.h>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "bench_runtime: FAILED: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void check(bool ok, const std::string& message) {
  if (!ok) fail(message);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Options {
  std::vector<std::string> parts = {"hit", "threads", "boxed"};
  int reps = 11;
  int64_t hit_iters = 500000;
  std::vector<int> threads = {1, 2, 4, 8};
  int threads_reps = 5;
  double duration_ms = 100;
  int weights = 16;
  std::vector<int64_t> sizes = {8, 32};
  int64_t boxed_iters = 5000;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The weights: fp32 leaves that require grad, the tensors both caches keep a cast of.
std::vector<at::Tensor> make_weights(int count, int64_t n) {
  std::vector<at::Tensor> w;
  for (int i = 0; i < count; ++i) w.push_back(at::randn({n, n}).requires_grad_());
  return w;
}

// PyTorch's CPU autocast on this thread, bf16, cache on (its cache is used only then).
struct TorchAutocastOn {
  TorchAutocastOn() {
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_cache_enabled(true);
  }
  ~TorchAutocastOn() { at::autocast::set_autocast_enabled(at::kCPU, false); }
  TorchAutocastOn(const TorchAutocastOn&) = delete;
  TorchAutocastOn& operator=(const TorchAutocastOn&) = delete;
};

at::Tensor ours_cast(const at::Tensor& w) { return autocastgen::cached_cast(at::kBFloat16, w, c10::DeviceType::CPU); }
at::Tensor torch_cast(const at::Tensor& w) { return at::autocast::cached_cast(at::kBFloat16, w, c10::DeviceType::CPU); }

// The casts of `weights` a cache returns after a first (missing) call, checked to be hits: a second
// call must return the very same bf16 tensor.
template <typename Cast>
std::vector<const c10::TensorImpl*> warm(const std::vector<at::Tensor>& weights, Cast cast, const char* who) {
  std::vector<const c10::TensorImpl*> cached;
  for (const at::Tensor& w : weights) {
    const at::Tensor first = cast(w);
    check(first.scalar_type() == at::kBFloat16, std::string(who) + ": cached_cast did not cast to bfloat16");
    check(cast(w).unsafeGetTensorImpl() == first.unsafeGetTensorImpl(),
          std::string(who) + ": a second cached_cast of a weight returned a new tensor (not cached)");
    cached.push_back(first.unsafeGetTensorImpl());
  }
  return cached;
}

// ---------------------------------------------------------------------------------------------
// hit: ns per cache hit on one thread.

template <typename Cast>
double time_hits(const at::Tensor& w, const c10::TensorImpl* cached, int64_t iters, Cast cast, const char* who) {
  uint64_t mismatches = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < iters; ++i) mismatches += cast(w).unsafeGetTensorImpl() != cached;
  const double ns = seconds_since(start) * 1e9 / static_cast<double>(iters);
  check(mismatches == 0, std::string(who) + ": a timed cached_cast missed the cache");
  return ns;
}

std::string part_hit(const Options& o) {
  const at::Tensor w = make_weights(1, 64)[0];
  std::vector<double> ours, torch;
  const autocastgen::AutocastScope scope(c10::DeviceType::CPU, at::kBFloat16);
  const TorchAutocastOn torch_on;
  const auto* ours_cached = warm({w}, ours_cast, "ours")[0];
  const auto* torch_cached = warm({w}, torch_cast, "PyTorch")[0];
  check(autocastgen::cast_cache_size(c10::DeviceType::CPU) == 1, "ours: cast_cache_size(CPU) != 1 after one weight");
  // One untimed round of each, then alternate which goes first.
  time_hits(w, ours_cached, o.hit_iters / 10 + 1, ours_cast, "ours");
  time_hits(w, torch_cached, o.hit_iters / 10 + 1, torch_cast, "PyTorch");
  for (int r = 0; r < o.reps; ++r) {
    if (r % 2 == 0) {
      ours.push_back(time_hits(w, ours_cached, o.hit_iters, ours_cast, "ours"));
      torch.push_back(time_hits(w, torch_cached, o.hit_iters, torch_cast, "PyTorch"));
    } else {
      torch.push_back(time_hits(w, torch_cached, o.hit_iters, torch_cast, "PyTorch"));
      ours.push_back(time_hits(w, ours_cached, o.hit_iters, ours_cast, "ours"));
    }
  }
  at::autocast::clear_cache();
  std::ostringstream json;
  json << "{\"weight\": \"64x64 fp32, requires_grad\", \"iters\": " << o.hit_iters << ", \"ours_ns\": [";
  for (size_t i = 0; i < ours.size(); ++i) json << (i ? ", " : "") << ours[i];
  json << "], \"torch_ns\": [";
  for (size_t i = 0; i < torch.size(); ++i) json << (i ? ", " : "") << torch[i];
  json << "]}";
  return json.str();
}

// ---------------------------------------------------------------------------------------------
// threads: aggregate hits/s with T threads on shared weights.

enum class Impl { ours, torch };

// What one worker thread sees and reports.
struct Worker {
  int index = 0;
  const std::vector<at::Tensor>* weights = nullptr;
  const std::vector<const c10::TensorImpl*>* torch_cached = nullptr;
  std::barrier<>* ready = nullptr;
  const std::atomic<bool>* stop = nullptr;
  double rate = 0;    // hits/s
  std::string error;  // set when a check failed
};

// Hits the cache round robin over the weights until `stop`, timing its own loop.
template <typename Cast>
void hit_loop(Worker& w, Cast cast, const std::vector<const c10::TensorImpl*>& cached) {
  const std::vector<at::Tensor>& weights = *w.weights;
  const size_t n = weights.size();
  w.ready->arrive_and_wait();
  uint64_t hits = 0, misses = 0;
  size_t k = static_cast<size_t>(w.index) % n;  // threads start on different weights
  const auto start = Clock::now();
  while (!w.stop->load(std::memory_order_relaxed)) {
    for (int i = 0; i < 64; ++i) {
      misses += cast(weights[k]).unsafeGetTensorImpl() != cached[k];
      if (++k == n) k = 0;
    }
    hits += 64;
  }
  w.rate = static_cast<double>(hits) / seconds_since(start);
  if (misses != 0) w.error = "a timed cached_cast missed the cache";
}

void worker_main(Impl impl, Worker& w) {
  try {
    if (impl == Impl::ours) {
      // Our cache is per thread: each thread opens its scope and fills its own cache.
      const autocastgen::AutocastScope scope(c10::DeviceType::CPU, at::kBFloat16);
      const auto cached = warm(*w.weights, ours_cast, "ours");
      if (autocastgen::cast_cache_size(c10::DeviceType::CPU) != w.weights->size())
        w.error = "cast_cache_size(CPU) differs from the number of weights";
      hit_loop(w, ours_cast, cached);
    } else {
      // PyTorch's cache is one process-wide map, warmed by the main thread; each thread turns
      // autocast on for itself (the state is thread-local) and must find the same casts.
      const TorchAutocastOn torch_on;
      for (size_t i = 0; i < w.weights->size(); ++i)
        if (torch_cast((*w.weights)[i]).unsafeGetTensorImpl() != (*w.torch_cached)[i])
          w.error = "a worker thread missed PyTorch's warmed cache";
      hit_loop(w, torch_cast, *w.torch_cached);
    }
  } catch (const std::exception& e) {
    fail(std::string("a worker thread threw: ") + e.what());
  }
}

// One measurement: `count` threads set up their autocast state and warm their view of the cache,
// wait for each other, then hit the cache for about `duration_ms`. The aggregate is the sum of
// the per-thread rates.
double run_threads(Impl impl, int count, const std::vector<at::Tensor>& weights,
                   const std::vector<const c10::TensorImpl*>& torch_cached, double duration_ms) {
  std::atomic<bool> stop{false};
  std::barrier<> ready(count + 1);
  std::vector<Worker> workers(static_cast<size_t>(count));
  std::vector<std::thread> pool;
  for (int t = 0; t < count; ++t) {
    Worker& w = workers[static_cast<size_t>(t)];
    w = Worker{t, &weights, &torch_cached, &ready, &stop, 0, ""};
    pool.emplace_back(worker_main, impl, std::ref(w));
  }
  ready.arrive_and_wait();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(duration_ms));
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : pool) th.join();
  double total = 0;
  for (const Worker& w : workers) {
    if (!w.error.empty()) fail(std::string(impl == Impl::ours ? "ours" : "PyTorch") + " threads: " + w.error);
    total += w.rate;
  }
  return total;
}

std::string part_threads(const Options& o) {
  const std::vector<at::Tensor> weights = make_weights(o.weights, 64);
  std::vector<const c10::TensorImpl*> torch_cached;
  {
    const TorchAutocastOn torch_on;
    torch_cached = warm(weights, torch_cast, "PyTorch");
  }
  std::map<int, std::vector<double>> ours, torch;
  for (int count : o.threads) {  // untimed round
    run_threads(Impl::ours, count, weights, torch_cached, o.duration_ms / 4);
    run_threads(Impl::torch, count, weights, torch_cached, o.duration_ms / 4);
  }
  for (int r = 0; r < o.threads_reps; ++r) {
    for (int count : o.threads) {
      if (r % 2 == 0) {
        ours[count].push_back(run_threads(Impl::ours, count, weights, torch_cached, o.duration_ms));
        torch[count].push_back(run_threads(Impl::torch, count, weights, torch_cached, o.duration_ms));
      } else {
        torch[count].push_back(run_threads(Impl::torch, count, weights, torch_cached, o.duration_ms));
        ours[count].push_back(run_threads(Impl::ours, count, weights, torch_cached, o.duration_ms));
      }
    }
  }
  at::autocast::clear_cache();
  std::ostringstream json;
  json << "{\"weights\": " << o.weights << ", \"duration_ms\": " << o.duration_ms << ", \"counts\": [";
  for (size_t i = 0; i < o.threads.size(); ++i) json << (i ? ", " : "") << o.threads[i];
  json << "]";
  for (auto [name, data] : {std::pair{"ours_hps", &ours}, std::pair{"torch_hps", &torch}}) {
    json << ", \"" << name << "\": {";
    bool first = true;
    for (const auto& [count, samples] : *data) {
      json << (first ? "" : ", ") << "\"" << count << "\": [";
      for (size_t i = 0; i < samples.size(); ++i) json << (i ? ", " : "") << samples[i];
      json << "]";
      first = false;
    }
    json << "}";
  }
  json << "}";
  return json.str();
}

// ---------------------------------------------------------------------------------------------
// boxed: the generated (unboxed) wrapper against the runtime-policy boxed kernel, same op.

// The shared object a pointer lies in ("" for the heap or the stack).
std::string object_of(const void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The line of aten::mm's computed dispatch table for AutocastCPU: which kernel is installed.
std::string autocast_cpu_kernel() {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  std::istringstream table(op.dumpComputedTable());
  for (std::string line; std::getline(table, line);)
    if (line.rfind("AutocastCPU:", 0) == 0) return line;
  return "(no AutocastCPU entry)";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

enum class Kernel { generated, runtime_policy };

// Times `iters` calls of at::mm(a, b) and checks that each went through one kernel of the kind
// `kernel`: wrapper_trace().calls grows by exactly `iters`, last_op is aten::mm, and the string
// it points at lies in the generated library exactly when the generated wrapper is claimed.
double time_mm(const at::Tensor& a, const at::Tensor& b, int64_t iters, Kernel kernel, const char* what) {
  auto& trace = autocastgen::torch::wrapper_trace();
  const uint64_t before = trace.calls;
  trace.last_op = nullptr;
  at::ScalarType out_dtype = at::kFloat;
  const auto start = Clock::now();
  for (int64_t i = 0; i < iters; ++i) out_dtype = at::mm(a, b).scalar_type();
  const double ns = seconds_since(start) * 1e9 / static_cast<double>(iters);
  const uint64_t calls = trace.calls - before;
  check(calls == static_cast<uint64_t>(iters),
        std::string(what) + ": wrapper_trace().calls grew by " + std::to_string(calls) + " over " + std::to_string(iters) +
            " calls of at::mm (expected one traced kernel per call)");
  check(trace.last_op != nullptr && std::strcmp(trace.last_op, "aten::mm") == 0,
        std::string(what) + ": the last traced kernel is " + (trace.last_op ? trace.last_op : "(none)") + ", not aten::mm");
  const bool in_generated = object_of(trace.last_op).find("libautocastgen_torch_cpu") != std::string::npos;
  check(in_generated == (kernel == Kernel::generated),
        std::string(what) + (in_generated ? ": the generated wrapper ran, not the runtime-policy kernel"
                                          : ": the generated wrapper did not run") +
            " (AutocastCPU kernel of aten::mm: " + autocast_cpu_kernel() + ")");
  check(out_dtype == at::kBFloat16, std::string(what) + ": at::mm did not return bfloat16 under bf16 autocast");
  return ns;
}

void load_generated_library() {
  if (!dlopen(AUTOCASTGEN_CPU_LIBRARY, RTLD_NOW | RTLD_GLOBAL))
    fail(std::string("cannot load ") + AUTOCASTGEN_CPU_LIBRARY + ": " + dlerror());
}

std::string part_boxed(const Options& o) {
  load_generated_library();
  std::ostringstream json;
  json << "{\"iters\": " << o.boxed_iters << ", \"generated_kernel\": " << json_string(autocast_cpu_kernel());
  std::string runtime_kernel;
  json << ", \"cases\": {";
  bool first_case = true;
  for (int64_t n : o.sizes) {
    const at::Tensor a = at::randn({n, n});
    const at::Tensor b = at::randn({n, n});
    std::vector<double> unboxed, boxed, boxed_scope;
    // (a) and (b) run under PyTorch's autocast state; (c) under an AutocastScope alone.
    auto measure_unboxed = [&](int64_t iters) {
      const TorchAutocastOn torch_on;
      return time_mm(a, b, iters, Kernel::generated, "generated wrapper");
    };
    auto measure_boxed = [&](int64_t iters) {
      const TorchAutocastOn torch_on;
      return time_mm(a, b, iters, Kernel::runtime_policy, "runtime-policy kernel (at::autocast state)");
    };
    auto measure_boxed_scope = [&](int64_t iters) {
      check(!at::autocast::is_autocast_enabled(at::kCPU), "at::autocast is on where it should be off");
      const autocastgen::AutocastScope scope(c10::DeviceType::CPU, at::kBFloat16);
      return time_mm(a, b, iters, Kernel::runtime_policy, "runtime-policy kernel (AutocastScope)");
    };
    for (int r = -1; r < o.reps; ++r) {  // r = -1: untimed round
      const int64_t iters = r < 0 ? o.boxed_iters / 5 + 1 : o.boxed_iters;
      const double u = measure_unboxed(iters);
      autocastgen::register_runtime_policy("aten::mm", "lower_precision_fp", "cpu");
      if (runtime_kernel.empty()) runtime_kernel = autocast_cpu_kernel();
      double bx = 0, bs = 0;
      if (r % 2 == 0) {
        bx = measure_boxed(iters);
        bs = measure_boxed_scope(iters);
      } else {
        bs = measure_boxed_scope(iters);
        bx = measure_boxed(iters);
      }
      autocastgen::clear_runtime_policies();
      if (r >= 0) {
        unboxed.push_back(u);
        boxed.push_back(bx);
        boxed_scope.push_back(bs);
      }
    }
    json << (first_case ? "" : ", ") << "\"mm " << n << "x" << n << "\": {";
    first_case = false;
    bool first = true;
    for (auto [name, samples] : {std::pair{"unboxed_ns", &unboxed}, std::pair{"boxed_ns", &boxed},
                                 std::pair{"boxed_scope_ns", &boxed_scope}}) {
      json << (first ? "" : ", ") << "\"" << name << "\": [";
      for (size_t i = 0; i < samples->size(); ++i) json << (i ? ", " : "") << (*samples)[i];
      json << "]";
      first = false;
    }
    json << "}";
  }
  json << "}, \"runtime_kernel\": " << json_string(runtime_kernel) << "}";
  return json.str();
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  return CPU_COUNT(&set);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t len = std::strlen(name);
      return arg.compare(0, len, name) == 0 ? argv[i] + len : nullptr;
    };
    if (const char* v = value("--parts=")) o.parts = split(v);
    else if (const char* v = value("--reps=")) o.reps = std::atoi(v);
    else if (const char* v = value("--hit-iters=")) o.hit_iters = std::atoll(v);
    else if (const char* v = value("--threads=")) {
      o.threads.clear();
      for (const auto& t : split(v)) o.threads.push_back(std::atoi(t.c_str()));
    } else if (const char* v = value("--threads-reps=")) o.threads_reps = std::atoi(v);
    else if (const char* v = value("--duration-ms=")) o.duration_ms = std::atof(v);
    else if (const char* v = value("--weights=")) o.weights = std::atoi(v);
    else if (const char* v = value("--sizes=")) {
      o.sizes.clear();
      for (const auto& s : split(v)) o.sizes.push_back(std::atoll(s.c_str()));
    } else if (const char* v = value("--boxed-iters=")) o.boxed_iters = std::atoll(v);
    else {
      std::fprintf(stderr,
                   "usage: %s [--parts=hit,threads,boxed] [--reps=N] [--hit-iters=N] [--threads=1,2,4,8]\n"
                   "          [--threads-reps=N] [--duration-ms=MS] [--weights=N] [--sizes=8,32] [--boxed-iters=N]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.reps < 1 || o.hit_iters < 1 || o.threads_reps < 1 || o.duration_ms <= 0 || o.weights < 1 || o.boxed_iters < 1 ||
      o.threads.empty() || std::any_of(o.threads.begin(), o.threads.end(), [](int t) { return t < 1; })) {
    std::fprintf(stderr, "bench_runtime: every count must be positive\n");
    return 2;
  }
  for (const std::string& part : o.parts)
    if (part != "hit" && part != "threads" && part != "boxed") fail("unknown part " + part + " (hit, threads, boxed)");
  // The parts time single-threaded dispatch and casts; intra-op threads would only add noise.
  at::set_num_threads(1);
  std::ostringstream json;
  json << "{\"hardware_concurrency\": " << std::thread::hardware_concurrency() << ", \"affinity_cpus\": " << affinity_cpus()
       << ", \"torch_threads\": " << at::get_num_threads();
  try {
    for (const std::string& part : o.parts) {
      if (part == "hit") json << ", \"hit\": " << part_hit(o);
      else if (part == "threads") json << ", \"threads\": " << part_threads(o);
      else json << ", \"boxed\": " << part_boxed(o);
    }
  } catch (const std::exception& e) {
    fail(std::string("threw: ") + e.what());
  }
  json << "}\n";
  std::fputs(json.str().c_str(), stdout);
  return 0;
}
