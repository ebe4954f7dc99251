// The CUDA unscale kernel's tuning swept on a GPU (Note [loads in flight]): loads in flight per
// thread (Unroll 1, 2, 4, 8) and chunks of the base size (a 256M-element gradient takes three
// launches) or 4x that (one launch), on one 256M-element gradient per dtype, against a device-to-device copy of
// the same bytes in the same run; and the kernels' GPU time for 1000 gradients of 4099 elements.
// CUDA events, median of 15 samples, each sample unscaling by 1/2 then 2 (every element read and
// written). One JSON line per row. Run by scripts/gpu-check; usage: bench_unscale_sweep [NUMEL]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <vector>

#include "../../kernels/cuda/unscale_kernel.cuh"
#include "autocastgen/kernels/scaler_cuda.h"

namespace {

using namespace autocastgen::kernels;  // NOLINT
using namespace autocastgen::kernels::cuda::unscale;  // NOLINT
using autocastgen::kernels::cuda::kChunkElements;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "bench_unscale_sweep: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

// Median milliseconds of one call of `run`, timed with events around pairs of calls.
float median_ms(const std::function<void(int)>& run) {
  for (int i = 0; i < 4; ++i) run(i);
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "event");
  check(cudaEventCreate(&end), "event");
  std::vector<float> samples;
  for (int s = 0; s < 15; ++s) {
    check(cudaEventRecord(begin), "record");
    run(0);
    run(1);
    check(cudaEventRecord(end), "record");
    check(cudaEventSynchronize(end), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, begin, end), "elapsed");
    samples.push_back(ms / 2);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <DType D, int Unroll>
class Launcher final : public CudaLaunchSink {
 public:
  explicit Launcher(UnscaleArgs<kMaxChunks>& args) : args_(args) {}
  void launch(DType, std::span<const CudaChunk> chunks) override {
    unscale_kernel<D, kMaxChunks, Unroll><<<static_cast<unsigned>(chunks.size()), kThreads>>>(args_);
  }

 private:
  UnscaleArgs<kMaxChunks>& args_;
};

// Each call alternates the factor (1/2, then 2) so the values come back exactly.
template <DType D, int Unroll>
float unscale_ms(const std::vector<GradSpan>& grads, std::int64_t chunk, float* found, const float* factors) {
  static UnscaleArgs<kMaxChunks> args;
  args.found_inf = found;
  return median_ms([&](int i) {
    args.inv_scale = factors + i;
    Launcher<D, Unroll> launcher(args);
    pack_cuda_launches(grads, chunk, args.chunks, false, launcher);
  });
}

template <DType D>
void sweep(const char* name, std::int64_t numel, float* found, const float* factors) {
  const std::size_t bytes = static_cast<std::size_t>(numel) * dtype_size(D);
  void* data = nullptr;
  void* copy = nullptr;
  check(cudaMalloc(&data, bytes), "cudaMalloc");
  check(cudaMalloc(&copy, bytes), "cudaMalloc");
  check(cudaMemset(data, 0x3c, bytes), "memset");  // finite in every dtype
  const float copy_ms = median_ms([&](int i) {
    check(cudaMemcpyAsync(i ? data : copy, i ? copy : data, bytes, cudaMemcpyDeviceToDevice), "copy");
  });
  const double moved = 2.0 * static_cast<double>(bytes);
  std::printf("{\"row\": \"copy %lld %s\", \"GBps\": %.1f}\n", static_cast<long long>(numel), name, moved / copy_ms / 1e6);
  const std::vector<GradSpan> one{{data, numel, D}};
  for (const std::int64_t chunk : {kChunkElements, 4 * kChunkElements}) {
    const float ms[] = {unscale_ms<D, 1>(one, chunk, found, factors), unscale_ms<D, 2>(one, chunk, found, factors),
                        unscale_ms<D, 4>(one, chunk, found, factors), unscale_ms<D, 8>(one, chunk, found, factors)};
    const int unrolls[] = {1, 2, 4, 8};
    for (int k = 0; k < 4; ++k) {
      std::printf("{\"row\": \"unscale %lld %s\", \"unroll\": %d, \"chunk\": %lld, \"GBps\": %.1f, \"over_copy\": %.4f}\n",
                  static_cast<long long>(numel), name, unrolls[k], static_cast<long long>(chunk),
                  moved / ms[k] / 1e6, copy_ms / ms[k]);
    }
  }
  check(cudaFree(data), "cudaFree");
  check(cudaFree(copy), "cudaFree");
}

void list_sweep(float* found, const float* factors) {
  constexpr int kCount = 1000;
  constexpr std::int64_t kNumel = 4099;
  constexpr std::size_t kStride = (kNumel * 4 + 255) / 256 * 256;  // each gradient 256-byte aligned
  void* data = nullptr;
  check(cudaMalloc(&data, kCount * kStride), "cudaMalloc");
  check(cudaMemset(data, 0, kCount * kStride), "memset");
  std::vector<GradSpan> grads;
  for (int i = 0; i < kCount; ++i) grads.push_back({static_cast<char*>(data) + i * kStride, kNumel, DType::Float32});
  const float ms[] = {unscale_ms<DType::Float32, 1>(grads, kChunkElements, found, factors),
                      unscale_ms<DType::Float32, 2>(grads, kChunkElements, found, factors),
                      unscale_ms<DType::Float32, 4>(grads, kChunkElements, found, factors),
                      unscale_ms<DType::Float32, 8>(grads, kChunkElements, found, factors)};
  const int unrolls[] = {1, 2, 4, 8};
  for (int k = 0; k < 4; ++k) {
    std::printf("{\"row\": \"unscale %d x %lld float32 (GPU time, kernels only)\", \"unroll\": %d, \"us\": %.2f}\n", kCount,
                static_cast<long long>(kNumel), unrolls[k], ms[k] * 1e3);
  }
  check(cudaFree(data), "cudaFree");
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_unscale_sweep: no CUDA device\n");
    return 2;
  }
  const std::int64_t numel = argc > 1 ? std::atoll(argv[1]) : std::int64_t{256} << 20;
  float* found = nullptr;
  float* factors = nullptr;
  check(cudaMalloc(&found, sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&factors, 2 * sizeof(float)), "cudaMalloc");
  const float host_factors[2] = {0.5f, 2.0f};
  check(cudaMemcpy(factors, host_factors, sizeof host_factors, cudaMemcpyHostToDevice), "copy");
  sweep<DType::Float32>("float32", numel, found, factors);
  sweep<DType::BFloat16>("bfloat16", numel, found, factors);
  sweep<DType::Float16>("float16", numel, found, factors);
  list_sweep(found, factors);
  check(cudaDeviceSynchronize(), "sync");
  return 0;
}
