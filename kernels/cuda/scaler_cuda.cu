// CUDA grad-scaler kernels: chunked multi-tensor unscale + inf check, and the scale update.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autocastgen/kernels/cuda_launch_plan.h"
#include "autocastgen/kernels/scaler_cuda.h"
#include "autocastgen/kernels/scaler_element.h"
#include "autocastgen/kernels/scaler_update.h"
#include "unscale_kernel.cuh"

namespace autocastgen::kernels::cuda {
namespace {

using unscale::kMaxChunks;
using unscale::kSmallChunks;
using unscale::kThreads;
using unscale::UnscaleArgs;
using unscale::unscale_kernel;

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
