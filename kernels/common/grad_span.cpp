// Overlap test for gradient lists (decides between parallel and in-order processing).
#include "autocastgen/kernels/grad_span.h"

#include <algorithm>
#include <vector>

namespace autocastgen::kernels {

bool grad_spans_overlap(std::span<const GradSpan> grads) {
  struct Range {
    std::uintptr_t begin;
    std::uintptr_t end;
  };
  std::vector<Range> ranges;
  ranges.reserve(grads.size());
  for (const GradSpan& g : grads) {
    if (g.numel <= 0) continue;
    const auto begin = reinterpret_cast<std::uintptr_t>(g.data);
    ranges.push_back({begin, begin + static_cast<std::uintptr_t>(g.numel) * dtype_size(g.dtype)});
  }
  if (ranges.size() < 2) return false;
  // Gradient lists are usually allocated in order, so this is often already sorted.
  const auto by_begin = [](const Range& a, const Range& b) { return a.begin < b.begin; };
  if (!std::is_sorted(ranges.begin(), ranges.end(), by_begin)) {
    std::sort(ranges.begin(), ranges.end(), by_begin);
  }
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) return true;
  }
  return false;
}

}  // namespace autocastgen::kernels
