// Gradient-list helpers: the overlap test (in address order, shuffled, touching, empty) and validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "autocastgen/kernels/grad_span.h"

namespace autocastgen::kernels {
namespace {

GradSpan at(std::vector<float>& storage, std::int64_t begin, std::int64_t numel) {
  return {storage.data() + begin, numel, DType::Float32};
}

TEST(GradSpanOverlap, DisjointListsInAnyOrderDoNotOverlap) {
  std::vector<float> storage(1000);
  std::vector<GradSpan> spans;
  for (std::int64_t i = 0; i < 100; ++i) spans.push_back(at(storage, 10 * i, 10));  // touching, in order
  EXPECT_FALSE(grad_spans_overlap(spans));
  std::mt19937_64 rng(3);
  for (int round = 0; round < 10; ++round) {
    std::shuffle(spans.begin(), spans.end(), rng);
    EXPECT_FALSE(grad_spans_overlap(spans));
  }
}

TEST(GradSpanOverlap, AnySharedElementIsFoundWhereverItSits) {
  std::vector<float> storage(1000);
  std::mt19937_64 rng(4);
  for (int round = 0; round < 50; ++round) {
    std::vector<GradSpan> spans;
    for (std::int64_t i = 0; i < 40; ++i) spans.push_back(at(storage, 20 * i, 20));
    // Stretch one span by one element into its neighbour, then shuffle (or not).
    const auto victim = static_cast<std::size_t>(rng() % 39);
    spans[victim].numel += 1;
    if (round % 2 == 1) std::shuffle(spans.begin(), spans.end(), rng);
    EXPECT_TRUE(grad_spans_overlap(spans)) << "round " << round;
  }
  // The same span twice, and a span inside another.
  EXPECT_TRUE(grad_spans_overlap(std::vector<GradSpan>{at(storage, 0, 5), at(storage, 0, 5)}));
  EXPECT_TRUE(grad_spans_overlap(std::vector<GradSpan>{at(storage, 100, 50), at(storage, 0, 10), at(storage, 120, 1)}));
}

// Lists made of runs in address order (as allocators hand them out), in random run order,
// against a pairwise check.
TEST(GradSpanOverlap, RunsInAnyOrderAgreeWithAPairwiseCheck) {
  std::vector<float> storage(100000);
  std::mt19937_64 rng(5);
  const auto pairwise = [](const std::vector<GradSpan>& spans) {
    for (std::size_t i = 0; i < spans.size(); ++i) {
      for (std::size_t j = i + 1; j < spans.size(); ++j) {
        const auto* a = static_cast<const float*>(spans[i].data);
        const auto* b = static_cast<const float*>(spans[j].data);
        if (spans[i].numel > 0 && spans[j].numel > 0 && a < b + spans[j].numel && b < a + spans[i].numel) return true;
      }
    }
    return false;
  };
  int overlapping = 0;
  for (int round = 0; round < 300; ++round) {
    const int runs = 1 + static_cast<int>(rng() % 9);
    std::vector<std::vector<GradSpan>> by_run(static_cast<std::size_t>(runs));
    for (int r = 0; r < runs; ++r) {
      std::int64_t at_element = 10000 * r + static_cast<std::int64_t>(rng() % 50);
      const int count = static_cast<int>(rng() % 40);
      for (int t = 0; t < count; ++t) {
        const std::int64_t numel = static_cast<std::int64_t>(rng() % 30);
        by_run[static_cast<std::size_t>(r)].push_back(at(storage, at_element, numel));
        at_element += numel + static_cast<std::int64_t>(rng() % 3);
      }
    }
    std::shuffle(by_run.begin(), by_run.end(), rng);
    std::vector<GradSpan> spans;
    for (const auto& run : by_run) spans.insert(spans.end(), run.begin(), run.end());
    if (round % 3 == 0 && spans.size() > 1) {  // one span moved near the start of another
      const GradSpan& host = spans[rng() % spans.size()];
      GradSpan& victim = spans[rng() % spans.size()];
      victim.data = static_cast<float*>(host.data) + rng() % 3;
      victim.numel = 1 + static_cast<std::int64_t>(rng() % 5);
    }
    const bool expected = pairwise(spans);
    overlapping += expected;
    ASSERT_EQ(grad_spans_overlap(spans), expected) << "round " << round;
  }
  EXPECT_GT(overlapping, 10);
  EXPECT_LT(overlapping, 290);
}

TEST(GradSpanOverlap, EmptySpansAndMixedElementSizesCount) {
  std::vector<float> storage(100);
  // Zero-size spans never overlap anything, even at the same address as another span.
  EXPECT_FALSE(grad_spans_overlap(std::vector<GradSpan>{at(storage, 0, 10), at(storage, 5, 0), at(storage, 10, 3)}));
  EXPECT_FALSE(grad_spans_overlap({}));
  // A bfloat16 span's end is measured in its own element size: 8 bf16 elements are 4 floats.
  auto* bytes = reinterpret_cast<unsigned char*>(storage.data());
  const GradSpan bf{bytes, 8, DType::BFloat16};
  EXPECT_FALSE(grad_spans_overlap(std::vector<GradSpan>{bf, at(storage, 4, 2)}));
  EXPECT_TRUE(grad_spans_overlap(std::vector<GradSpan>{at(storage, 3, 2), bf}));
  const GradSpan d{bytes + 16, 1, DType::Float64};  // floats 4 and 5
  EXPECT_TRUE(grad_spans_overlap(std::vector<GradSpan>{at(storage, 5, 1), d}));
}

TEST(GradSpanValidation, TheFirstBadSpanIsNamedWithItsProblem) {
  std::vector<float> storage(8);
  const auto message = [&](std::vector<GradSpan> spans) -> std::string {
    try {
      validate_grad_spans(spans, "op");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({at(storage, 0, 8), at(storage, 0, 0)}), "");
  EXPECT_EQ(message({{nullptr, 0, DType::Float16}}), "") << "empty spans may have no data";
  EXPECT_NE(message({at(storage, 0, 8), {nullptr, 2, DType::Float32}, {nullptr, -1, DType::Float32}})
                .find("op: gradient 1 has numel > 0 and a null data pointer"),
            std::string::npos);
  EXPECT_NE(message({{storage.data(), -3, DType::Float32}}).find("op: gradient 0 has a negative numel (-3)"),
            std::string::npos);
  EXPECT_NE(message({{storage.data(), 1, static_cast<DType>(7)}}).find("op: gradient 0 has an unknown dtype"),
            std::string::npos);
  auto* odd = reinterpret_cast<unsigned char*>(storage.data()) + 2;
  EXPECT_NE(message({{odd, 1, DType::Float16}, {odd, 1, DType::Float64}})
                .find("op: gradient 1 is not aligned to its element size (8 bytes for float64)"),
            std::string::npos);
}

}  // namespace
}  // namespace autocastgen::kernels
