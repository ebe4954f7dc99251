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
// Note [loads in flight]: a thread issues kUnroll 16-byte loads before it uses the first, so that a
// partly filled GPU (a launch's last wave, a short list) still keeps enough bytes in flight to
// stream at the memory's bandwidth; one load at a time reached 0.855 of a copy's on an H200.
constexpr int kUnroll = 4;

template <DType D, std::size_t Capacity>
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
    std::int64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < n_vectors; i += kUnroll * kThreads) {
      Vector x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u].raw = pv[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        apply(x[u]);
        if (write) pv[i + u * kThreads] = x[u].raw;
      }
    }
    for (; i < n_vectors; i += kThreads) {
      Vector x;
      x.raw = pv[i];
      apply(x);
      if (write) pv[i] = x.raw;
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

template <std::size_t Capacity>
void launch_unscale(DType dtype, const UnscaleArgs<Capacity>& args, unsigned blocks, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32: unscale_kernel<DType::Float32, Capacity><<<blocks, kThreads, 0, stream>>>(args); break;
    case DType::Float16: unscale_kernel<DType::Float16, Capacity><<<blocks, kThreads, 0, stream>>>(args); break;
    case DType::BFloat16: unscale_kernel<DType::BFloat16, Capacity><<<blocks, kThreads, 0, stream>>>(args); break;
    case DType::Float64: unscale_kernel<DType::Float64, Capacity><<<blocks, kThreads, 0, stream>>>(args); break;
  }
}

constexpr const char* kUnscaleWho = "autocastgen::kernels::cuda::non_finite_check_and_unscale";

// The packer writes the chunks straight into the large block (Note [launch packing]); a short
// launch is copied into a small block first (Note [parameter blocks]).
class Launcher final : public CudaLaunchSink {
 public:
  Launcher(UnscaleArgs<kMaxChunks>& large, cudaStream_t stream) : large_(large), stream_(stream) {}
  void launch(DType dtype, std::span<const CudaChunk> chunks) override {
    const auto blocks = static_cast<unsigned>(chunks.size());
    if constexpr (kMaxChunks > kSmallChunks) {
      if (chunks.size() <= kSmallChunks) {
        UnscaleArgs<kSmallChunks> small;
        small.inv_scale = large_.inv_scale;
        small.found_inf = large_.found_inf;
        std::copy(chunks.begin(), chunks.end(), small.chunks);
        launch_unscale(dtype, small, blocks, stream_);
        check_launch(kUnscaleWho);
        return;
      }
    }
    launch_unscale(dtype, large_, blocks, stream_);
    check_launch(kUnscaleWho);
  }

 private:
  UnscaleArgs<kMaxChunks>& large_;
  cudaStream_t stream_;
};

}  // namespace

std::size_t max_chunks_per_launch() { return kMaxChunks; }
std::size_t small_launch_chunks() { return kSmallChunks; }

void non_finite_check_and_unscale(std::span<const GradSpan> grads, float* found_inf,
                                  const float* inv_scale, void* stream) {
  if (found_inf == nullptr || inv_scale == nullptr) {
    throw_invalid_argument(std::string(kUnscaleWho) + ": found_inf and inv_scale must not be null");
  }
  UnscaleArgs<kMaxChunks> args;  // ~32 KB: static storage would not be thread safe, the stack is fine
  args.inv_scale = inv_scale;
  args.found_inf = found_inf;
  Launcher launcher(args, static_cast<cudaStream_t>(stream));
  prepare_unscale_launches(grads, kChunkElements, args.chunks, launcher, kUnscaleWho);
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
