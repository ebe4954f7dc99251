// CUDA kernels against the CPU kernel (same element logic); skipped when no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/kernels/scaler_cuda.h"
#include "kernel_test_util.h"

namespace autocastgen::kernels {
namespace {

using namespace testing;  // NOLINT

#define CUDA_OK(expr)                                                          \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device (" << cudaGetErrorString(err) << "): GPU tests skipped";
    }
    CUDA_OK(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

bool is_nan_bits(DType d, std::uint64_t b) {
  switch (d) {
    case DType::Float32: return std::isnan(f32_from(static_cast<std::uint32_t>(b)));
    case DType::Float16: return half_is_nan(static_cast<std::uint16_t>(b));
    case DType::BFloat16: return bf16_is_nan(static_cast<std::uint16_t>(b));
    case DType::Float64: return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (b << 12) != 0;
  }
  return false;
}

// Runs the same list through the CPU baseline kernel and the CUDA kernel and compares.
void compare_with_cpu(std::vector<Buffer>& host, float inv, cudaStream_t stream) {
  std::vector<Buffer> cpu = host;
  std::vector<GradSpan> cpu_spans;
  for (Buffer& b : cpu) cpu_spans.push_back(b.span());
  float cpu_found = 0.0f;
  non_finite_check_and_unscale_cpu(cpu_spans, &cpu_found, inv, {CpuIsa::Baseline});

  // One device allocation per gradient, at the same misalignment as on the host.
  std::vector<void*> device(host.size(), nullptr);
  std::vector<GradSpan> spans;
  for (std::size_t i = 0; i < host.size(); ++i) {
    const std::size_t bytes = host[i].bytes.size();
    CUDA_OK(cudaMalloc(&device[i], bytes));
    CUDA_OK(cudaMemcpy(device[i], host[i].bytes.data(), bytes, cudaMemcpyHostToDevice));
    spans.push_back({static_cast<unsigned char*>(device[i]) + host[i].offset, host[i].numel, host[i].dtype});
  }
  float* d_found = nullptr;
  float* d_inv = nullptr;
  CUDA_OK(cudaMalloc(&d_found, sizeof(float)));
  CUDA_OK(cudaMalloc(&d_inv, sizeof(float)));
  CUDA_OK(cudaMemset(d_found, 0, sizeof(float)));
  CUDA_OK(cudaMemcpy(d_inv, &inv, sizeof(float), cudaMemcpyHostToDevice));
  cuda::non_finite_check_and_unscale(spans, d_found, d_inv, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  float gpu_found = -1.0f;
  CUDA_OK(cudaMemcpy(&gpu_found, d_found, sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(gpu_found, cpu_found);
  for (std::size_t i = 0; i < host.size(); ++i) {
    CUDA_OK(cudaMemcpy(host[i].bytes.data(), device[i], host[i].bytes.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(device[i]));
    for (std::int64_t k = 0; k < host[i].numel; ++k) {
      const std::uint64_t want = cpu[i].get(k);
      const std::uint64_t got = host[i].get(k);
      const DType d = host[i].dtype;
      ASSERT_TRUE(want == got || (is_nan_bits(d, want) && is_nan_bits(d, got)))
          << dtype_name(d) << " tensor " << i << " element " << k << ": cpu 0x" << std::hex << want << " gpu 0x" << got;
    }
  }
  cudaFree(d_found);
  cudaFree(d_inv);
}

TEST_F(CudaKernels, MatchesCpuOnMixedListsWithSpecialsAndMisalignment) {
  std::mt19937_64 rng(1);
  std::vector<Buffer> host;
  std::uniform_int_distribution<std::int64_t> size(0, 200000);
  for (int t = 0; t < 40; ++t) {
    const DType d = kAllDTypes[t % 4];
    host.emplace_back(d, size(rng), (t % 3 == 2) ? dtype_size(d) : 0);
    for (std::int64_t i = 0; i < host.back().numel; ++i) host.back().set(i, rng());  // any bits
  }
  for (float inv : {0.5f, 1.0f / 3.0f, 1.0f, 3e4f}) compare_with_cpu(host, inv, stream_);
}

TEST_F(CudaKernels, SpecialsAtChunkBoundariesFirstAndLastElement) {
  std::mt19937_64 rng(2);
  for (DType d : kAllDTypes) {
    for (Special s : {Special::PosInf, Special::NegInf, Special::NaN}) {
      for (std::int64_t pos : {std::int64_t{0}, cuda::kChunkElements - 1, cuda::kChunkElements,
                               2 * cuda::kChunkElements + 1, 3 * cuda::kChunkElements + 6}) {
        std::vector<Buffer> host;
        host.emplace_back(d, 3 * cuda::kChunkElements + 7);
        for (std::int64_t i = 0; i < host[0].numel; ++i) host[0].set(i, random_finite_bits(d, rng));
        host[0].set(pos, special_bits(d, s));
        compare_with_cpu(host, 0.25f, stream_);
      }
    }
  }
}

TEST_F(CudaKernels, MoreChunksThanOneLaunchCarries) {
  std::vector<Buffer> host;
  const std::size_t n = cuda::max_chunks_per_launch() + 5;
  for (std::size_t t = 0; t < n; ++t) host.emplace_back(DType::BFloat16, 33);
  host.back().set(32, special_bits(DType::BFloat16, Special::NaN));
  compare_with_cpu(host, 0.5f, stream_);
}

// One gradient longer than a launch carries (two launches): specials at a chunk's start and at the end.
TEST_F(CudaKernels, OneGradientLongerThanALaunch) {
  const std::int64_t n = static_cast<std::int64_t>(cuda::max_chunks_per_launch() + 1) * cuda::kChunkElements + 5;
  std::vector<Buffer> host;
  host.emplace_back(DType::Float16, n);
  std::mt19937_64 rng(5);
  for (std::int64_t i = 0; i < n; ++i) host[0].set(i, random_finite_bits(DType::Float16, rng));
  compare_with_cpu(host, 0.5f, stream_);
  host[0].set(cuda::kChunkElements, special_bits(DType::Float16, Special::NaN));
  host[0].set(n - 1, special_bits(DType::Float16, Special::PosInf));
  compare_with_cpu(host, 0.5f, stream_);
}

// Note [parameter blocks] in scaler_cuda.cu: launches of up to small_launch_chunks() chunks use the
// small block, longer ones the large block; a special value in the last chunk of each size.
TEST_F(CudaKernels, SmallAndLargeParameterBlocksAtTheirBoundary) {
  const std::size_t small = cuda::small_launch_chunks();
  if (small >= cuda::max_chunks_per_launch()) GTEST_SKIP() << "CUDA < 12.1: one parameter block size";
  for (std::size_t n : {std::size_t{1}, small, small + 1, cuda::max_chunks_per_launch()}) {
    std::vector<Buffer> host;
    for (std::size_t t = 0; t < n; ++t) host.emplace_back(DType::Float16, 9);
    host.back().set(8, special_bits(DType::Float16, Special::PosInf));
    compare_with_cpu(host, 0.5f, stream_);
  }
}

TEST_F(CudaKernels, OverlappingGradientsAreUnscaledInOrder) {
  float* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1000 * sizeof(float)));
  std::vector<float> h(1000, 8.0f);
  CUDA_OK(cudaMemcpy(d, h.data(), 1000 * sizeof(float), cudaMemcpyHostToDevice));
  float* found = nullptr;
  float* inv = nullptr;
  CUDA_OK(cudaMalloc(&found, 4));
  CUDA_OK(cudaMalloc(&inv, 4));
  const float half = 0.5f;
  CUDA_OK(cudaMemcpy(inv, &half, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(found, 0, 4));
  const std::vector<GradSpan> spans{{d, 1000, DType::Float32}, {d, 1000, DType::Float32}};
  cuda::non_finite_check_and_unscale(spans, found, inv, stream_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  CUDA_OK(cudaMemcpy(h.data(), d, 1000 * sizeof(float), cudaMemcpyDeviceToHost));
  for (float v : h) ASSERT_EQ(v, 2.0f);
  cudaFree(d);
  cudaFree(found);
  cudaFree(inv);
}

TEST_F(CudaKernels, UpdateScaleKernelFollowsTheSharedRule) {
  std::mt19937 rng(3);
  std::bernoulli_distribution inf(0.2);
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 5;
  cfg.backoff_factor = 0.7;
  cfg.hysteresis = 2;
  cfg.max_scale = 1e6f;
  float* d = nullptr;  // scale, found_inf
  std::int32_t* di = nullptr;  // tracker, hysteresis_left
  CUDA_OK(cudaMalloc(&d, 2 * sizeof(float)));
  CUDA_OK(cudaMalloc(&di, 2 * sizeof(std::int32_t)));
  float scale = 65536.0f;
  std::int32_t state[2] = {0, 2};
  CUDA_OK(cudaMemcpy(d, &scale, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(di, state, 8, cudaMemcpyHostToDevice));
  for (int i = 0; i < 500; ++i) {
    const float f = inf(rng) ? 1.0f : 0.0f;
    CUDA_OK(cudaMemcpyAsync(d + 1, &f, 4, cudaMemcpyHostToDevice, stream_));
    cuda::update_scale(d, di, di + 1, d + 1, cfg, stream_);
    update_scale_cpu(&scale, &state[0], &state[1], f, cfg);
    float gs = 0.0f;
    std::int32_t gi[2];
    CUDA_OK(cudaMemcpyAsync(&gs, d, 4, cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaMemcpyAsync(gi, di, 8, cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    ASSERT_EQ(gs, scale) << "step " << i;
    ASSERT_EQ(gi[0], state[0]) << "step " << i;
    ASSERT_EQ(gi[1], state[1]) << "step " << i;
  }
  cudaFree(d);
  cudaFree(di);
}

TEST_F(CudaKernels, EmptyListLaunchesNothingAndNullPointersAreRejected) {
  float* found = nullptr;
  CUDA_OK(cudaMalloc(&found, 4));
  cuda::non_finite_check_and_unscale({}, found, found, stream_);
  EXPECT_THROW(cuda::non_finite_check_and_unscale({}, nullptr, found, stream_), std::invalid_argument);
  EXPECT_THROW(cuda::update_scale(nullptr, nullptr, nullptr, found, {}, stream_), std::invalid_argument);
  CUDA_OK(cudaStreamSynchronize(stream_));
  cudaFree(found);
}

}  // namespace
}  // namespace autocastgen::kernels
