// The CUDA work list (host side, so it runs without a GPU): coverage, packing, order, the per-call
// preparation with a recording sink in place of the launches, errors.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>
#include <string>

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

// Records what a launch would get: the dtype, a copy of the chunks, and where they lay.
class RecordingSink final : public CudaLaunchSink {
 public:
  void launch(DType dtype, std::span<const CudaChunk> chunks) override {
    launches.push_back(CudaLaunch{dtype, {chunks.begin(), chunks.end()}});
    starts.push_back(chunks.data());
  }
  std::vector<CudaLaunch> launches;
  std::vector<const CudaChunk*> starts;
};

TEST(CudaLaunchPacking, ChunksAreWrittenIntoTheGivenBufferAndMatchThePlan) {
  std::mt19937_64 rng(21);
  for (int round = 0; round < 30; ++round) {
    std::vector<Buffer> buffers;
    const int count = static_cast<int>(rng() % 30);
    for (int t = 0; t < count; ++t) buffers.emplace_back(kAllDTypes[rng() % 4], static_cast<std::int64_t>(rng() % 200));
    std::vector<GradSpan> grads;
    for (Buffer& b : buffers) grads.push_back(b.span());
    const std::int64_t chunk = 1 + static_cast<std::int64_t>(rng() % 50);
    const std::size_t cap = 1 + rng() % 6;
    for (bool in_order : {false, true}) {
      std::vector<CudaChunk> buffer(cap);
      RecordingSink sink;
      pack_cuda_launches(grads, chunk, buffer, in_order, sink);
      // Every launch is handed over from the start of the caller's buffer (the kernel-parameter
      // block on CUDA), never from a copy.
      for (const CudaChunk* start : sink.starts) EXPECT_EQ(start, buffer.data());
      const auto plan = plan_cuda_launches(grads, chunk, cap, in_order);
      ASSERT_EQ(sink.launches.size(), plan.size());
      for (std::size_t l = 0; l < plan.size(); ++l) {
        EXPECT_EQ(sink.launches[l].dtype, plan[l].dtype);
        ASSERT_EQ(sink.launches[l].chunks.size(), plan[l].chunks.size());
        for (std::size_t c = 0; c < plan[l].chunks.size(); ++c) {
          EXPECT_EQ(sink.launches[l].chunks[c].data, plan[l].chunks[c].data);
          EXPECT_EQ(sink.launches[l].chunks[c].numel, plan[l].chunks[c].numel);
        }
      }
      expect_exact_cover(grads, sink.launches, chunk, cap);
    }
  }
}

TEST(CudaLaunchPacking, GroupsByDtypeInAFixedOrderAndFillsLaunches) {
  Buffer h1(DType::Float16, 5);
  Buffer f1(DType::Float32, 12);
  Buffer d1(DType::Float64, 4);
  Buffer f2(DType::Float32, 3);
  const std::vector<GradSpan> grads{h1.span(), f1.span(), d1.span(), f2.span()};
  const auto plan = plan_cuda_launches(grads, 4, 2, false);
  // float32: 4+4+4 (f1) then 3 (f2) -> launches of 2 and 2; then float16 5 -> 4+1; float64 4.
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].dtype, DType::Float32);
  EXPECT_EQ(plan[0].chunks.size(), 2u);
  EXPECT_EQ(plan[1].dtype, DType::Float32);
  EXPECT_EQ(plan[1].chunks[1].data, f2.data());
  EXPECT_EQ(plan[2].dtype, DType::Float16);
  EXPECT_EQ(plan[2].chunks.size(), 2u);
  EXPECT_EQ(plan[3].dtype, DType::Float64);
}

TEST(CudaLaunchPacking, PrepareValidatesThenPacksInOrderOnlyWhenGradientsOverlap) {
  Buffer a(DType::Float32, 20);
  Buffer b(DType::Float16, 6);
  std::vector<CudaChunk> buffer(8);
  {
    RecordingSink sink;
    prepare_unscale_launches(std::vector<GradSpan>{a.span(), b.span()}, 8, buffer, sink, "who");
    // Disjoint: grouped by dtype and packed, float32's three chunks in one launch.
    ASSERT_EQ(sink.launches.size(), 2u);
    EXPECT_EQ(sink.launches[0].chunks.size(), 3u);
  }
  {
    // The second half of `a` listed after `a` itself: overlapping, so one gradient per launch,
    // in list order (the stream then applies them one after the other).
    const GradSpan half{static_cast<unsigned char*>(a.data()) + 10 * 4, 10, DType::Float32};
    RecordingSink sink;
    prepare_unscale_launches(std::vector<GradSpan>{a.span(), b.span(), half}, 8, buffer, sink, "who");
    ASSERT_EQ(sink.launches.size(), 3u);
    EXPECT_EQ(sink.launches[0].chunks[0].data, a.data());
    EXPECT_EQ(sink.launches[1].dtype, DType::Float16);
    EXPECT_EQ(sink.launches[2].chunks[0].data, half.data);
  }
  RecordingSink sink;
  try {
    prepare_unscale_launches(std::vector<GradSpan>{a.span(), {nullptr, 4, DType::Float16}}, 8, buffer, sink,
                             "my_op");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("my_op: gradient 1 has numel > 0 and a null data pointer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(sink.launches.empty()) << "nothing is launched for a list that fails validation";
}

TEST(CudaLaunchPacking, ASinkErrorStopsThePacking) {
  class FailingSink final : public CudaLaunchSink {
   public:
    void launch(DType, std::span<const CudaChunk>) override {
      ++calls;
      throw std::runtime_error("launch failed");
    }
    int calls = 0;
  };
  Buffer a(DType::Float32, 40);
  std::vector<CudaChunk> buffer(2);
  FailingSink sink;
  EXPECT_THROW(pack_cuda_launches(std::vector<GradSpan>{a.span()}, 8, buffer, false, sink), std::runtime_error);
  EXPECT_EQ(sink.calls, 1);
  RecordingSink ok;
  EXPECT_THROW(pack_cuda_launches(std::vector<GradSpan>{a.span()}, 8, {}, false, ok), std::invalid_argument);
}

}  // namespace
}  // namespace autocastgen::kernels
