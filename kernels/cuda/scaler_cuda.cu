// CUDA grad-scaler kernels: chunked multi-tensor unscale + inf check, and the scale update.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autocastgen/kernels/cuda_launch_plan.h"
#include "autocastgen/kernels/scaler_cuda.h"
#include "autocastgen/kernels/scaler_element.h"
#include "autocastgen/kernels/scaler_update.h"

namespace autocastgen::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Kernel parameters may hold 32764 bytes from CUDA 12.1 on (Volta and newer; this library builds
// for sm_80 and sm_90), 4096 before; the work list travels there, so no device buffer, copy or
// allocation is needed per call.
#if CUDART_VERSION >= 12010
constexpr int kMaxChunks = 2000;
#else
constexpr int kMaxChunks = 250;
#endif

struct UnscaleArgs {
  const float* inv_scale;
  float* found_inf;
  CudaChunk chunks[kMaxChunks];
};
static_assert(sizeof(CudaChunk) == 16, "CudaChunk must stay 16 bytes: it sizes the launch");
static_assert(sizeof(UnscaleArgs) <= (CUDART_VERSION >= 12010 ? 32764 : 4096),
              "the work list must fit the kernel parameter space");

// One block per chunk. Each thread loads 16 bytes at a time when the chunk is 16-byte aligned
// (always, for a tensor whose storage is; chunks are multiples of 8 elements apart), applies the
// shared element logic to each element, and stores back. The block ORs its threads' flags and
// one thread writes found_inf: at most one global write per block.
template <DType D>
__global__ void __launch_bounds__(kThreads) unscale_kernel(const __grid_constant__ UnscaleArgs args) {
  using L = ScalarLane<D>;
  using S = typename L::Stored;
  constexpr int kPerVector = 16 / sizeof(S);
  union Vector {
    uint4 raw;
    S v[kPerVector];
  };

  const CudaChunk chunk = args.chunks[blockIdx.x];
  S* p = static_cast<S*>(chunk.data);
  const std::int64_t n = chunk.numel;
  const float inv_f = *args.inv_scale;
  const bool write = unscale_writes(inv_f);
  const typename L::Wide inv = L::broadcast(inv_f);
  typename L::Flag bad = 0;

  std::int64_t scalar_begin = 0;
  if ((reinterpret_cast<std::uintptr_t>(p) & 15u) == 0) {
    const std::int64_t n_vectors = n / kPerVector;
    uint4* pv = reinterpret_cast<uint4*>(p);
    for (std::int64_t i = threadIdx.x; i < n_vectors; i += kThreads) {
      Vector x;
      x.raw = pv[i];
      if (write) {
#pragma unroll
        for (int k = 0; k < kPerVector; ++k) x.v[k] = unscale_value<L>(x.v[k], inv, bad);
        pv[i] = x.raw;
      } else {
#pragma unroll
        for (int k = 0; k < kPerVector; ++k) check_value<L>(x.v[k], bad);
      }
    }
    scalar_begin = n_vectors * kPerVector;
  }
  for (std::int64_t i = scalar_begin + threadIdx.x; i < n; i += kThreads) {
    if (write) {
      p[i] = unscale_value<L>(p[i], inv, bad);
    } else {
      check_value<L>(p[i], bad);
    }
  }
  if (__syncthreads_or(bad != 0) != 0 && threadIdx.x == 0) *args.found_inf = 1.0f;
}

__global__ void update_scale_kernel(float* scale, std::int32_t* growth_tracker,
                                    std::int32_t* hysteresis_left, const float* found_inf,
                                    ScaleUpdateConfig config) {
  update_scale_step(scale, growth_tracker, hysteresis_left, *found_inf, config);
}

void check_launch(const char* who) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(who) + ": kernel launch failed: " +
                             cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
  }
}

template <DType D>
void launch_unscale(const UnscaleArgs& args, unsigned blocks, cudaStream_t stream) {
  unscale_kernel<D><<<blocks, kThreads, 0, stream>>>(args);
}

}  // namespace

std::size_t max_chunks_per_launch() { return kMaxChunks; }

void non_finite_check_and_unscale(std::span<const GradSpan> grads, float* found_inf,
                                  const float* inv_scale, void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::cuda::non_finite_check_and_unscale";
  validate_grad_spans(grads, kWho);
  if (found_inf == nullptr || inv_scale == nullptr) {
    throw_invalid_argument(std::string(kWho) + ": found_inf and inv_scale must not be null");
  }
  const bool in_order = grad_spans_overlap(grads);
  const std::vector<CudaLaunch> launches =
      plan_cuda_launches(grads, kChunkElements, kMaxChunks, in_order);
  auto s = static_cast<cudaStream_t>(stream);
  UnscaleArgs args;  // ~32 KB: static storage would not be thread safe, the stack is fine
  args.inv_scale = inv_scale;
  args.found_inf = found_inf;
  for (const CudaLaunch& launch : launches) {
    std::copy(launch.chunks.begin(), launch.chunks.end(), args.chunks);
    const auto blocks = static_cast<unsigned>(launch.chunks.size());
    switch (launch.dtype) {
      case DType::Float32: launch_unscale<DType::Float32>(args, blocks, s); break;
      case DType::Float16: launch_unscale<DType::Float16>(args, blocks, s); break;
      case DType::BFloat16: launch_unscale<DType::BFloat16>(args, blocks, s); break;
      case DType::Float64: launch_unscale<DType::Float64>(args, blocks, s); break;
    }
    check_launch(kWho);
  }
}

void update_scale(float* scale, std::int32_t* growth_tracker, std::int32_t* hysteresis_left,
                  const float* found_inf, const ScaleUpdateConfig& config, void* stream) {
  static constexpr const char* kWho = "autocastgen::kernels::cuda::update_scale";
  if (scale == nullptr || growth_tracker == nullptr || found_inf == nullptr) {
    throw_invalid_argument(std::string(kWho) + ": scale, growth_tracker and found_inf must not be null");
  }
  update_scale_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(
      scale, growth_tracker, hysteresis_left, found_inf, config);
  check_launch(kWho);
}

}  // namespace autocastgen::kernels::cuda
