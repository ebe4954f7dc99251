// Grad-scaler benchmark: CPU unscale against memcpy and PyTorch's op, and the per-call host work.
//
// Every variant processes the same bytes in the same run; bench/scaler_ratios.py turns the JSON
// output into ratio tables (method: bench/README.md). Two parts:
//   cpu/...   the CPU op on one 64M-element tensor and on 1000 tensors of 4096 elements, per dtype,
//             with PyTorch's threads and with one thread, next to the kernel alone (one thread,
//             the kernel library's pool, PyTorch's OpenMP pool) and memcpy.
//   host/...  what one call costs on the host for 1000 tensors, without the device work: the
//             host side of the CUDA path with the launches replaced by a stub (no GPU here), the
//             steps PyTorch's CUDA op runs before its launches, and the dispatcher's share.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/ForeachUtils.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "autocastgen/kernels/cuda_launch_plan.h"
#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/kernels/scaler_cuda.h"
#include "autocastgen/scaler/ops.h"
#include "scaler/scaler_glue.h"

namespace {

namespace kernels = autocastgen::kernels;

struct Shape {
  const char* name;
  int64_t tensors;
  int64_t elements;
};
constexpr Shape kBig{"big_64M", 1, int64_t{64} << 20};
constexpr Shape kMany{"many_1000x4K", 1000, 4096};
// The CUDA row of issue 14: 4099 elements, so tensors are not multiples of a vector width.
constexpr Shape kHost{"1000x4099", 1000, 4099};

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

kernels::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kernels::DType::Float16;
    case at::kBFloat16: return kernels::DType::BFloat16;
    case at::kDouble: return kernels::DType::Float64;
    default: return kernels::DType::Float32;
  }
}

std::vector<kernels::GradSpan> spans_of(std::vector<at::Tensor>& grads) {
  std::vector<kernels::GradSpan> spans;
  for (auto& g : grads) spans.push_back({g.data_ptr(), g.numel(), kernel_dtype(g.scalar_type())});
  return spans;
}

// Alternating 0.5 and 2 keeps the values where they started (no drift into subnormals), and
// neither is 1, so every variant reads and writes every element.
float next_inv(int64_t& k) { return (k++ % 2 == 0) ? 0.5f : 2.0f; }

void report(benchmark::State& state, int64_t bytes) {
  // Bytes read plus bytes written, the same accounting for every variant (memcpy included).
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
}

// Runs the body with PyTorch's intra-op pool limited to `threads` (0: leave it alone).
class TorchThreads {
 public:
  explicit TorchThreads(int threads) : saved_(at::get_num_threads()) {
    if (threads > 0) at::set_num_threads(threads);
  }
  ~TorchThreads() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

// --- cpu/ ----------------------------------------------------------------------------------------

void BM_Ours(benchmark::State& state, Shape shape, at::ScalarType dtype, int threads) {
  auto grads = make_grads(shape, dtype);
  at::Tensor found = at::zeros({});
  const TorchThreads limit(threads);
  int64_t k = 0;
  for (auto _ : state) {
    autocastgen::ops::non_finite_check_and_unscale_(grads, found, at::full({}, next_inv(k)));
  }
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf");
  report(state, total_bytes(grads));
}

void BM_TorchAmp(benchmark::State& state, Shape shape, at::ScalarType dtype, int threads) {
  auto grads = make_grads(shape, dtype);
  at::Tensor found = at::zeros({});
  const TorchThreads limit(threads);
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

// memcpy of the same bytes (src -> dst, both pre-faulted): one thread, and split in equal shares
// over the threads the op uses (the glue's executor, Note [CPU threads in the glue] in
// runtime/torch/scaler/scaler_ops.cpp).
void BM_Memcpy(benchmark::State& state, Shape shape, at::ScalarType dtype, bool parallel) {
  auto src = make_grads(shape, dtype);
  auto dst = make_grads(shape, dtype);
  for (auto _ : state) {
    for (size_t i = 0; i < src.size(); ++i) {
      auto* d = static_cast<char*>(dst[i].data_ptr());
      const auto* s = static_cast<const char*>(src[i].const_data_ptr());
      const int64_t n = src[i].nbytes();
      if (parallel) {
        const kernels::Executor& ex = autocastgen::torch_glue::cpu_executor();
        const int64_t workers = ex.workers_for(n / 4);
        ex.run(workers, [&](int64_t w) {
          const int64_t b = n * w / workers;
          const int64_t e = n * (w + 1) / workers;
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

// The kernel library alone (no dispatcher, no checks): on one thread, and on its own pool.
void BM_Kernel(benchmark::State& state, Shape shape, at::ScalarType dtype, const kernels::Executor* executor) {
  auto grads = make_grads(shape, dtype);
  const auto spans = spans_of(grads);
  float found = 0.0f;
  int64_t k = 0;
  for (auto _ : state) {
    kernels::non_finite_check_and_unscale_cpu(spans, &found, next_inv(k), {kernels::CpuIsa::Auto, executor});
  }
  if (found != 0.0f) state.SkipWithError("unexpected inf");
  report(state, total_bytes(grads));
}

#if defined(AUTOCASTGEN_BENCH_OPENMP)
// The kernel's workers on PyTorch's OpenMP pool through at::parallel_for, which this file (built
// with OpenMP against PyTorch's libgomp) really runs in parallel; the glue's executor before
// issue 14 (Note [CPU threads in the glue] in runtime/torch/scaler/scaler_ops.cpp).
class OpenMpExecutor final : public kernels::Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    if (at::in_parallel_region()) return 1;
    const std::int64_t pieces = (elements + kernels::kCpuPieceElements - 1) / kernels::kCpuPieceElements;
    return std::clamp<std::int64_t>(pieces, 1, at::get_num_threads());
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    at::parallel_for(0, workers, 1, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) body(w);
    });
  }
};
const OpenMpExecutor kOpenMp;
#endif

// --- host/ ---------------------------------------------------------------------------------------
// 1000 fp32 tensors of 4099 elements on the CPU: their pointers stand in for device pointers,
// nothing is read or written through them.

// Stands in for the CUDA launcher: takes each launch's chunks as the driver would take the
// parameter block, without a driver.
class StubLaunches final : public kernels::CudaLaunchSink {
 public:
  void launch(kernels::DType, std::span<const kernels::CudaChunk> chunks) override {
    benchmark::DoNotOptimize(chunks.data());
    launches += 1;
    chunks_ += static_cast<int64_t>(chunks.size());
  }
  int64_t launches = 0;
  int64_t chunks_ = 0;
};

// The chunk array of the kernel-parameter block (it lives on the stack in the CUDA path too).
using ChunkBlock = std::array<kernels::CudaChunk, 2000>;

// Everything our CUDA op does on the host per call except the dispatcher, the device guard and
// the driver: argument checks, staging, validation, overlap test, packing.
void BM_HostOursGlue(benchmark::State& state) {
  auto grads = make_grads(kHost, at::kFloat);
  const at::Tensor found = at::zeros({});
  const at::Tensor inv = at::full({}, 0.5f);
  StubLaunches stub;
  for (auto _ : state) {
    autocastgen::torch_glue::check_unscale_scalars(found, inv, c10::DeviceType::CPU);
    autocastgen::torch_glue::StagedGrads staged(grads, found.device());
    ChunkBlock block;
    kernels::prepare_unscale_launches(staged.spans(), kernels::cuda::kChunkElements, block, stub, "bench");
  }
  state.counters["launches_per_call"] = static_cast<double>(stub.launches) / static_cast<double>(state.iterations());
}

// The kernel library's share of the above: validation, overlap test and packing of ready spans.
void BM_HostOursPrepare(benchmark::State& state) {
  auto grads = make_grads(kHost, at::kFloat);
  const auto spans = spans_of(grads);
  StubLaunches stub;
  for (auto _ : state) {
    ChunkBlock block;
    kernels::prepare_unscale_launches(spans, kernels::cuda::kChunkElements, block, stub, "bench");
  }
}

// PyTorch's CUDA op, before multi_tensor_apply fills its metadata and launches: the foreach
// checks (check_foreach_api_restrictions, can_use_fast_route: device, layout, density and dtype
// of every tensor) and the copy of the list it hands on (scaled_grads.vec()). This is PyTorch's
// own header code run on the same list, a lower bound of its per-call host work.
void BM_HostTorchPrefix(benchmark::State& state) {
  auto grads = make_grads(kHost, at::kFloat);
  const at::TensorList list(grads);
  for (auto _ : state) {
    at::native::check_foreach_api_restrictions(list);
    const bool fast = at::native::can_use_fast_route({list});
    std::vector<std::vector<at::Tensor>> tensor_lists;
    tensor_lists.emplace_back(list.vec());
    benchmark::DoNotOptimize(fast);
    benchmark::DoNotOptimize(tensor_lists.data());
  }
}

// The work list's own bytes (1000 chunks of 16 bytes) copied once: the floor of any packing.
void BM_HostMemcpyMetadata(benchmark::State& state) {
  std::vector<kernels::CudaChunk> src(static_cast<size_t>(kHost.tensors)), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(kernels::CudaChunk));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
}

// The dispatcher's share, measured on the CPU op with inv_scale 1 (a check, no writes) over
// 1000 one-element tensors: the whole op call, and the same glue and kernel called directly.
void BM_HostDispatchOp(benchmark::State& state) {
  auto grads = make_grads({"", 1000, 1}, at::kFloat);
  at::Tensor found = at::zeros({});
  const at::Tensor inv = at::ones({});
  for (auto _ : state) autocastgen::ops::non_finite_check_and_unscale_(grads, found, inv);
}

void BM_HostDispatchDirect(benchmark::State& state) {
  auto grads = make_grads({"", 1000, 1}, at::kFloat);
  at::Tensor found = at::zeros({});
  const at::Tensor inv = at::ones({});
  for (auto _ : state) {
    autocastgen::torch_glue::check_unscale_scalars(found, inv, c10::DeviceType::CPU);
    autocastgen::torch_glue::StagedGrads staged(grads, found.device());
    kernels::non_finite_check_and_unscale_cpu(staged.spans(), found.data_ptr<float>(), *inv.const_data_ptr<float>(),
                                              {kernels::CpuIsa::Auto, &kernels::serial_executor()});
  }
}

void register_all() {
  const auto reg = [](const std::string& name, auto fn) {
    return benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  const std::pair<const char*, at::ScalarType> dtypes[] = {
      {"float32", at::kFloat}, {"bfloat16", at::kBFloat16}, {"float16", at::kHalf}};
  for (const Shape& s : {kBig, kMany}) {
    const std::string n = s.name;
    for (const auto& [dn, dt] : dtypes) {
      const std::string d = dn;
      const at::ScalarType t = dt;
      reg("cpu/memcpy_1thread/" + d + "/" + n, [s, t](benchmark::State& st) { BM_Memcpy(st, s, t, false); });
      reg("cpu/memcpy_parallel/" + d + "/" + n, [s, t](benchmark::State& st) { BM_Memcpy(st, s, t, true); });
      reg("cpu/ours/" + d + "/" + n, [s, t](benchmark::State& st) { BM_Ours(st, s, t, 0); });
      reg("cpu/ours_1thread/" + d + "/" + n, [s, t](benchmark::State& st) { BM_Ours(st, s, t, 1); });
      reg("cpu/torch_amp/" + d + "/" + n, [s, t](benchmark::State& st) { BM_TorchAmp(st, s, t, 0); });
      reg("cpu/torch_amp_1thread/" + d + "/" + n, [s, t](benchmark::State& st) { BM_TorchAmp(st, s, t, 1); });
      reg("cpu/kernel_1thread/" + d + "/" + n,
          [s, t](benchmark::State& st) { BM_Kernel(st, s, t, &kernels::serial_executor()); });
      reg("cpu/kernel_pool/" + d + "/" + n,
          [s, t](benchmark::State& st) { BM_Kernel(st, s, t, &kernels::thread_executor()); });
#if defined(AUTOCASTGEN_BENCH_OPENMP)
      reg("cpu/kernel_omp/" + d + "/" + n, [s, t](benchmark::State& st) { BM_Kernel(st, s, t, &kOpenMp); });
#endif
    }
    reg("cpu/unfused/float32/" + n, [s](benchmark::State& st) { BM_Unfused(st, s, at::kFloat); });
  }
  reg("host/ours_glue/" + std::string(kHost.name), BM_HostOursGlue);
  reg("host/ours_prepare/" + std::string(kHost.name), BM_HostOursPrepare);
  reg("host/torch_prefix/" + std::string(kHost.name), BM_HostTorchPrefix);
  reg("host/memcpy_metadata/" + std::string(kHost.name), BM_HostMemcpyMetadata);
  reg("host/dispatch_op/1000x1", BM_HostDispatchOp);
  reg("host/dispatch_direct/1000x1", BM_HostDispatchDirect);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("cpu_isa", kernels::cpu_isa_name(kernels::best_cpu_isa()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
