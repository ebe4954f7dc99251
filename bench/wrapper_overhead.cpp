// Per-call overhead of generated autocast wrappers against PyTorch's built-in autocast kernels for
// the same ops. `--mode=builtin` times PyTorch's kernels; `--mode=generated` first loads our
// libraries (which override them: a process cannot go back) and times the same calls, each case
// three times: statistics off, on (`... [stats on]`, docs/insight.md), and the non-finite watch on in
// record mode (`... [watch on]`), interleaved in one process.
// bench/wrapper_overhead.py alternates the two modes over several rounds and prints the ratios.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <benchmark/benchmark.h>

#include <autocastgen/runtime/stats.h>
#include <autocastgen/runtime/watch.h>
#include <autocastgen/torch/policy_call.h>

namespace {

struct Case {
  std::string name;   // e.g. "cpu/mm"
  c10::DeviceType autocast_device;
  std::function<at::Tensor()> call;
  bool stats = false;  // per-op statistics on while it runs
  bool watch = false;  // the non-finite watch on (record mode) while it runs
};

// Tiny tensors so that dispatch and wrapper overhead dominate.
std::vector<Case> make_cases() {
  static const at::Tensor a = at::randn({2, 2});
  static const at::Tensor b = at::randn({2, 2});
  static const at::Tensor b16 = at::randn({2, 2}).to(at::kBFloat16);
  static const std::vector<at::Tensor> mixed = {a, b16};
  return {
      // The cpu policy (the one PyTorch and we both run here): real casts on CPU tensors. The
      // cuda policy cannot be timed without a GPU: AutocastCUDA is not reached for CPU tensors.
      {"cpu/mm (lower_precision_fp)", c10::DeviceType::CPU, [] { return at::mm(a, b); }},
      {"cpu/cat (promote)", c10::DeviceType::CPU, [] { return at::cat(mixed); }},
      {"cpu/mse_loss (fp32)", c10::DeviceType::CPU, [] { return at::mse_loss(b16, b16); }},
      {"cpu/conv1d (lower_precision_fp)", c10::DeviceType::CPU, [] { return at::conv1d(a.view({1, 2, 2}), b.view({2, 2, 1})); }},
  };
}

bool g_generated = false;  // --mode=generated

void run_case(benchmark::State& state, const Case& c) {
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(c.autocast_device, true);
  const uint64_t before = autocastgen::torch::wrapper_trace().calls;
  std::optional<autocastgen::stats::StatsScope> counting;
  if (c.stats) counting.emplace();
  std::optional<autocastgen::stats::FiniteWatch> watching;
  if (c.watch) watching.emplace(autocastgen::stats::FiniteMode::record);
  for (auto _ : state) benchmark::DoNotOptimize(c.call());
  watching.reset();
  counting.reset();
  const bool ran_generated = autocastgen::torch::wrapper_trace().calls != before;
  at::autocast::set_autocast_enabled(c.autocast_device, false);
  at::autocast::clear_cache();
  // Each case must measure what its mode says, or the comparison is meaningless.
  if (ran_generated != g_generated)
    state.SkipWithError(ran_generated ? "a generated wrapper ran in builtin mode" : "no generated wrapper ran");
}

void load(const char* path) {
  if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "builtin";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--mode=", 0) == 0) mode = std::string(argv[i]).substr(7);
  if (mode != "builtin" && mode != "generated") {
    std::fprintf(stderr, "usage: %s --mode=builtin|generated [benchmark flags]\n", argv[0]);
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  std::vector<Case> cases = make_cases();
  g_generated = mode == "generated";
  if (g_generated) {
    // AUTOCASTGEN_BENCH_LIBRARY: another build's generated library (a copy of a build from
    // before a change, timed by wrapper_overhead.py --before; bench/README.md).
    const char* library = std::getenv("AUTOCASTGEN_BENCH_LIBRARY");
    load(library != nullptr && *library != '\0' ? library : AUTOCASTGEN_CPU_LIBRARY);
    const size_t plain = cases.size();
    for (size_t i = 0; i < plain; ++i) {
      Case counted = cases[i];
      counted.name += " [stats on]";
      counted.stats = true;
      cases.push_back(counted);
      Case watched = cases[i];
      watched.name += " [watch on]";
      watched.watch = true;
      cases.push_back(watched);
    }
  }
  for (const Case& c : cases) benchmark::RegisterBenchmark(c.name.c_str(), run_case, c);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
