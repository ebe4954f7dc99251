// The CUDA unscale kernel, shared by the library (scaler_cuda.cu) and the benchmark that sweeps its
// tuning (bench/gpu/unscale_sweep.cu): internal to kernels/cuda and bench/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "autocastgen/kernels/cuda_launch_plan.h"
#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen::kernels::cuda::unscale {

constexpr int kThreads = 256;

// Note [parameter blocks]
// The work list travels in the kernel parameters, so a call needs no device buffer, copy,
// allocation or host sync. Parameters may take 32764 bytes from CUDA 12.1 on (Volta and newer;
// this library builds for sm_80 and sm_90), 4096 before. The driver copies the whole block into
// every launch, used or not, so launches of up to kSmallChunks chunks go through a second
// instantiation whose block fits the classic 4 KB, and only longer ones carry the large block.
// (The driver's cost per block size could not be measured here, without a GPU.)
constexpr std::size_t kSmallChunks = 255;
#if CUDART_VERSION >= 12010
constexpr std::size_t kMaxChunks = 2000;
#else
constexpr std::size_t kMaxChunks = kSmallChunks;
#endif

template <std::size_t Capacity>
struct UnscaleArgs {
  const float* inv_scale;
  float* found_inf;
  CudaChunk chunks[Capacity];
};
static_assert(sizeof(CudaChunk) == 16, "CudaChunk must stay 16 bytes: it sizes the launch");
static_assert(sizeof(UnscaleArgs<kSmallChunks>) <= 4096, "the small block must fit 4 KB");
static_assert(sizeof(UnscaleArgs<kMaxChunks>) <= (CUDART_VERSION >= 12010 ? 32764 : 4096),
              "the work list must fit the kernel parameter space");

// One block per chunk. Each thread loads 16 bytes at a time when the chunk is 16-byte aligned
// (always, for a tensor whose storage is; chunks are multiples of 8 elements apart), applies the
// shared element logic to each element, and stores back. The block ORs its threads' flags and
// one thread writes found_inf: at most one global write per block.
// Note [loads in flight]
// A thread issues up to kUnroll 16-byte loads (fewer at a chunk's end) before it uses the first, so
// that memory latency is hidden by loads in flight rather than by resident warps alone. Swept on an
// H100 (bench/gpu/unscale_sweep.cu, 256M elements, against a device-to-device copy of the same
// bytes): float32 0.923 / 0.913 / 0.925 / 0.935 of the copy's bandwidth with 1 / 2 / 4 / 8 loads,
// bfloat16 0.854 / 0.862 / 0.878 / 0.901, float16 0.892 / 0.898 / 0.904 / 0.921. Chunks of 4x the
// base size (so the list fits one launch instead of three) changed these by -2 % to +1 %: chunks
// keep the base size.
constexpr int kUnroll = 8;

template <DType D, std::size_t Capacity, int Unroll = kUnroll>
__global__ void __launch_bounds__(kThreads) unscale_kernel(const __grid_constant__ UnscaleArgs<Capacity> args) {
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
  const auto apply = [&](Vector& x) {
    if (write) {
#pragma unroll
      for (int k = 0; k < kPerVector; ++k) x.v[k] = unscale_value<L>(x.v[k], inv, bad);
    } else {
#pragma unroll
      for (int k = 0; k < kPerVector; ++k) check_value<L>(x.v[k], bad);
    }
  };

  std::int64_t scalar_begin = 0;
  if ((reinterpret_cast<std::uintptr_t>(p) & 15u) == 0) {
    const std::int64_t n_vectors = n / kPerVector;
    uint4* pv = reinterpret_cast<uint4*>(p);
    for (std::int64_t first = threadIdx.x; first < n_vectors; first += Unroll * kThreads) {
      Vector x[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        if (first + u * kThreads < n_vectors) x[u].raw = pv[first + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        if (first + u * kThreads < n_vectors) {
          apply(x[u]);
          if (write) pv[first + u * kThreads] = x[u].raw;
        }
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

}  // namespace autocastgen::kernels::cuda::unscale
