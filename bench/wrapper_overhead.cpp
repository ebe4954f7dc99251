// Per-call overhead of generated autocast wrappers against PyTorch's built-in autocast kernels for
// the same ops. `--mode=builtin` times PyTorch's kernels; `--mode=generated` first loads our
// libraries (which override them: a process cannot go back) and times the same calls.
// bench/wrapper_overhead.py alternates the two modes over several rounds and prints the ratios.
#include <dlfcn.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <benchmark/benchmark.h>

#include <autocastgen/torch/wrapper_support.h>

namespace {

struct Case {
  std::string name;   // e.g. "cpu/mm"
  c10::DeviceType autocast_device;
  std::function<at::Tensor()> call;
};

// Tiny tensors so that dispatch and wrapper overhead dominate.
std::vector<Case> make_cases() {
  static const at::Tensor a = at::randn({2, 2});
  static const at::Tensor b = at::randn({2, 2});
  static const at::Tensor b16 = at::randn({2, 2}).to(at::kBFloat16);
  static const std::vector<at::Tensor> mixed = {a, b16};
  return {
      // The cpu policy: real casts on CPU tensors.
      {"cpu/mm (lower_precision_fp)", c10::DeviceType::CPU, [] { return at::mm(a, b); }},
      {"cpu/cat (promote)", c10::DeviceType::CPU, [] { return at::cat(mixed); }},
      {"cpu/mse_loss (fp32)", c10::DeviceType::CPU, [] { return at::mse_loss(b16, b16); }},
      // The cuda policy on CPU tensors: the same wrapper machinery, no argument is eligible.
      {"cuda/mm (lower_precision_fp)", c10::DeviceType::CUDA, [] { return at::mm(a, b); }},
      {"cuda/log (fp32)", c10::DeviceType::CUDA, [] { return at::log(a); }},
      {"cuda/softmax (fp32_set_opt_dtype)", c10::DeviceType::CUDA, [] { return at::softmax(a, 1); }},
      {"cuda/cat (promote)", c10::DeviceType::CUDA, [] { return at::cat(mixed); }},
  };
}

void run_case(benchmark::State& state, const Case& c) {
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(c.autocast_device, true);
  for (auto _ : state) benchmark::DoNotOptimize(c.call());
  at::autocast::set_autocast_enabled(c.autocast_device, false);
  at::autocast::clear_cache();
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
  const std::vector<Case> cases = make_cases();
  for (const Case& c : cases) benchmark::RegisterBenchmark(c.name.c_str(), run_case, c);
  if (mode == "generated") {
    load(AUTOCASTGEN_CPU_LIBRARY);
    load(AUTOCASTGEN_CUDA_LIBRARY);
  }
  const uint64_t calls_before = autocastgen::torch::wrapper_trace().calls;
  benchmark::RunSpecifiedBenchmarks();
  const bool ran_generated = autocastgen::torch::wrapper_trace().calls != calls_before;
  if (ran_generated != (mode == "generated")) {
    std::fprintf(stderr, "error: generated wrappers %s in --mode=%s\n", ran_generated ? "ran" : "did not run", mode.c_str());
    return 1;
  }
  return 0;
}
