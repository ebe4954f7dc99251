// Grad-scaler CPU benchmark: fused unscale vs memcpy, the unfused ATen composition and PyTorch's op.
//
// Every variant processes the same bytes in the same run; bench/scaler_ratios.py turns the JSON
// output into the ratio table. Shapes: one 64M-element tensor and 1000 tensors of 4096 elements.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/scaler/ops.h"

namespace {

struct Shape {
  const char* name;
  int64_t tensors;
  int64_t elements;
};
constexpr Shape kBig{"big_64M", 1, int64_t{64} << 20};
constexpr Shape kMany{"many_1000x4K", 1000, 4096};

std::vector<at::Tensor> make_grads(const Shape& s, at::ScalarType dtype) {
  std::vector<at::Tensor> grads;
  for (int64_t i = 0; i < s.tensors; ++i) grads.push_back(at::randn({s.elements}).to(dtype));
  return grads;
}

int64_t total_bytes(const std::vector<at::Tensor>& grads) {
  int64_t b = 0;
  for (const auto& g : grads) b += g.nbytes();
  return b;
}

// Alternating 0.5 and 2 keeps the values where they started (no drift into subnormals), and
// neither is 1, so every variant reads and writes every element.
float next_inv(int64_t& k) { return (k++ % 2 == 0) ? 0.5f : 2.0f; }

void report(benchmark::State& state, int64_t bytes) {
  // Bytes read plus bytes written, the same accounting for every variant (memcpy included).
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
}

void BM_Ours(benchmark::State& state, Shape shape, at::ScalarType dtype) {
  auto grads = make_grads(shape, dtype);
  at::Tensor found = at::zeros({});
  int64_t k = 0;
  for (auto _ : state) {
    autocastgen::ops::non_finite_check_and_unscale_(grads, found, at::full({}, next_inv(k)));
  }
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf");
  report(state, total_bytes(grads));
}

void BM_TorchAmp(benchmark::State& state, Shape shape, at::ScalarType dtype) {
  auto grads = make_grads(shape, dtype);
  at::Tensor found = at::zeros({});
  int64_t k = 0;
  for (auto _ : state) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, at::full({}, next_inv(k)));
  }
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf");
  report(state, total_bytes(grads));
}

// What one writes without a fused op: per tensor, isfinite().all() and mul_.
void BM_Unfused(benchmark::State& state, Shape shape, at::ScalarType dtype) {
  auto grads = make_grads(shape, dtype);
  at::Tensor found = at::zeros({});
  int64_t k = 0;
  for (auto _ : state) {
    const at::Tensor inv = at::full({}, next_inv(k));
    for (auto& g : grads) {
      found.masked_fill_(at::isfinite(g).all().logical_not(), 1.0f);
      g.mul_(inv);
    }
  }
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf");
  report(state, total_bytes(grads));
}

// memcpy of the same bytes (src -> dst, both pre-faulted): one thread, and split over PyTorch's
// intra-op threads like the kernels are.
void BM_Memcpy(benchmark::State& state, Shape shape, bool parallel) {
  auto src = make_grads(shape, at::kFloat);
  auto dst = make_grads(shape, at::kFloat);
  for (auto _ : state) {
    for (size_t i = 0; i < src.size(); ++i) {
      auto* d = static_cast<char*>(dst[i].data_ptr());
      const auto* s = static_cast<const char*>(src[i].const_data_ptr());
      const int64_t n = src[i].nbytes();
      if (parallel) {
        at::parallel_for(0, n, int64_t{1} << 17, [&](int64_t b, int64_t e) {
          std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
        });
      } else {
        std::memcpy(d, s, static_cast<size_t>(n));
      }
    }
    benchmark::DoNotOptimize(dst[0].data_ptr());
    benchmark::ClobberMemory();
  }
  report(state, total_bytes(src));
}

// The kernel library alone, on one thread (no dispatcher, no checks, no thread pool): the
// single-core speed of the AVX2 loop.
void BM_KernelOnly(benchmark::State& state, Shape shape) {
  auto grads = make_grads(shape, at::kFloat);
  std::vector<autocastgen::kernels::GradSpan> spans;
  for (auto& g : grads) spans.push_back({g.data_ptr(), g.numel(), autocastgen::kernels::DType::Float32});
  float found = 0.0f;
  int64_t k = 0;
  for (auto _ : state) {
    autocastgen::kernels::non_finite_check_and_unscale_cpu(spans, &found, next_inv(k),
                                                           {autocastgen::kernels::CpuIsa::Auto, &autocastgen::kernels::serial_executor()});
  }
  report(state, total_bytes(grads));
}

void register_all() {
  for (const Shape& s : {kBig, kMany}) {
    const std::string n = s.name;
    const auto reg = [](const std::string& name, auto fn) {
      return benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
    };
    reg("memcpy_1thread/" + n, [s](benchmark::State& st) { BM_Memcpy(st, s, false); });
    reg("memcpy_parallel/" + n, [s](benchmark::State& st) { BM_Memcpy(st, s, true); });
    reg("ours/float32/" + n, [s](benchmark::State& st) { BM_Ours(st, s, at::kFloat); });
    reg("torch_amp/float32/" + n, [s](benchmark::State& st) { BM_TorchAmp(st, s, at::kFloat); });
    reg("unfused/float32/" + n, [s](benchmark::State& st) { BM_Unfused(st, s, at::kFloat); });
    reg("ours/bfloat16/" + n, [s](benchmark::State& st) { BM_Ours(st, s, at::kBFloat16); });
    reg("torch_amp/bfloat16/" + n, [s](benchmark::State& st) { BM_TorchAmp(st, s, at::kBFloat16); });
    reg("ours/float16/" + n, [s](benchmark::State& st) { BM_Ours(st, s, at::kHalf); });
    reg("torch_amp/float16/" + n, [s](benchmark::State& st) { BM_TorchAmp(st, s, at::kHalf); });
    reg("kernel_1thread/float32/" + n, [s](benchmark::State& st) { BM_KernelOnly(st, s); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("cpu_isa", autocastgen::kernels::cpu_isa_name(autocastgen::kernels::best_cpu_isa()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
