// The CUDA work list (host side, so it runs without a GPU): coverage, packing, order, errors.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "autocastgen/kernels/cuda_launch_plan.h"
#include "kernel_test_util.h"

namespace autocastgen::kernels {
namespace {

using namespace testing;  // NOLINT

// Every element of every gradient is covered by exactly one chunk.
void expect_exact_cover(const std::vector<GradSpan>& grads, const std::vector<CudaLaunch>& plan,
                        std::int64_t chunk_elements, std::size_t max_chunks) {
  std::map<std::uintptr_t, int> byte_hits;
  for (const CudaLaunch& l : plan) {
    ASSERT_FALSE(l.chunks.empty());
    ASSERT_LE(l.chunks.size(), max_chunks);
    for (const CudaChunk& c : l.chunks) {
      ASSERT_GT(c.numel, 0);
      ASSERT_LE(c.numel, chunk_elements);
      for (std::int64_t i = 0; i < c.numel; ++i) {
        ++byte_hits[reinterpret_cast<std::uintptr_t>(c.data) + static_cast<std::uintptr_t>(i) * dtype_size(l.dtype)];
      }
    }
  }
  std::size_t expected = 0;
  for (const GradSpan& g : grads) {
    for (std::int64_t i = 0; i < g.numel; ++i) {
      const auto addr = reinterpret_cast<std::uintptr_t>(g.data) + static_cast<std::uintptr_t>(i) * dtype_size(g.dtype);
      ASSERT_EQ(byte_hits[addr], 1) << "element " << i;
      ++expected;
    }
  }
  EXPECT_EQ(byte_hits.size(), expected);
}

TEST(CudaLaunchPlan, PacksSmallTensorsAndSplitsLargeOnes) {
  std::vector<Buffer> buffers;
  buffers.emplace_back(DType::Float32, 10);
  buffers.emplace_back(DType::Float16, 25);
  buffers.emplace_back(DType::Float32, 0);
  buffers.emplace_back(DType::Float32, 7);
  buffers.emplace_back(DType::BFloat16, 8);
  buffers.emplace_back(DType::Float64, 3);
  std::vector<GradSpan> grads;
  for (Buffer& b : buffers) grads.push_back(b.span());
  const auto plan = plan_cuda_launches(grads, 8, 3, false);
  expect_exact_cover(grads, plan, 8, 3);
  // float32: 10 -> 8+2, 7 -> 7: three chunks, one launch; float16: 25 -> 8+8+8+1: two launches.
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan[0].dtype, DType::Float32);
  EXPECT_EQ(plan[0].chunks.size(), 3u);
  EXPECT_EQ(plan[1].dtype, DType::Float16);
  EXPECT_EQ(plan[2].dtype, DType::Float16);
  EXPECT_EQ(plan[2].chunks.size(), 1u);
  EXPECT_EQ(plan[3].dtype, DType::BFloat16);
  EXPECT_EQ(plan[4].dtype, DType::Float64);
}

TEST(CudaLaunchPlan, InOrderKeepsEachLaunchToOneGradientInListOrder) {
  Buffer a(DType::Float32, 20);
  Buffer b(DType::Float16, 3);
  const std::vector<GradSpan> grads{a.span(), b.span(), a.span()};
  const auto plan = plan_cuda_launches(grads, 8, 2, true);
  // a: 8+8+4 over two launches; b: one; a again: two.
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan[0].chunks[0].data, a.data());
  EXPECT_EQ(plan[2].dtype, DType::Float16);
  EXPECT_EQ(plan[3].chunks[0].data, a.data());
}

TEST(CudaLaunchPlan, RandomListsAreCoveredExactly) {
  std::mt19937_64 rng(8);
  for (int round = 0; round < 20; ++round) {
    std::vector<Buffer> buffers;
    const int count = static_cast<int>(rng() % 40);
    for (int t = 0; t < count; ++t) buffers.emplace_back(kAllDTypes[rng() % 4], static_cast<std::int64_t>(rng() % 300));
    std::vector<GradSpan> grads;
    for (Buffer& b : buffers) grads.push_back(b.span());
    const std::int64_t chunk = 1 + static_cast<std::int64_t>(rng() % 64);
    const std::size_t cap = 1 + rng() % 5;
    expect_exact_cover(grads, plan_cuda_launches(grads, chunk, cap, false), chunk, cap);
    expect_exact_cover(grads, plan_cuda_launches(grads, chunk, cap, true), chunk, cap);
  }
}

TEST(CudaLaunchPlan, EmptyListsPlanNoLaunch) {
  EXPECT_TRUE(plan_cuda_launches({}, 8, 2, false).empty());
  const std::vector<GradSpan> empties{{nullptr, 0, DType::Float16}};
  EXPECT_TRUE(plan_cuda_launches(empties, 8, 2, false).empty());
  EXPECT_TRUE(plan_cuda_launches(empties, 8, 2, true).empty());
}

TEST(CudaLaunchPlan, RejectsZeroSizes) {
  EXPECT_THROW(plan_cuda_launches({}, 0, 2, false), std::invalid_argument);
  EXPECT_THROW(plan_cuda_launches({}, 8, 0, false), std::invalid_argument);
}

}  // namespace
}  // namespace autocastgen::kernels
