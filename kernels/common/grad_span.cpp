// Gradient lists: messages for invalid spans, and the overlap test (parallel or in-order work).
#include "autocastgen/kernels/grad_span.h"

#include <algorithm>
#include <string>
#include <vector>

namespace autocastgen::kernels {

void throw_invalid_grad_span(std::span<const GradSpan> grads, std::size_t index, const char* who,
                             std::source_location where) {
  const GradSpan& g = grads[index];
  const std::string prefix = std::string(who) + ": gradient " + std::to_string(index) + " ";
  if (dtype_size(g.dtype) == 0) throw_invalid_argument(prefix + "has an unknown dtype", where);
  if (g.numel < 0) {
    throw_invalid_argument(prefix + "has a negative numel (" + std::to_string(g.numel) + ")", where);
  }
  if (g.data == nullptr) throw_invalid_argument(prefix + "has numel > 0 and a null data pointer", where);
  throw_invalid_argument(prefix + "is not aligned to its element size (" +
                             std::to_string(dtype_size(g.dtype)) + " bytes for " +
                             dtype_name(g.dtype) + ")",
                         where);
}

bool grad_spans_overlap(std::span<const GradSpan> grads) {
  const auto begin_of = [](const GradSpan& g) { return reinterpret_cast<std::uintptr_t>(g.data); };
  const auto end_of = [&](const GradSpan& g) {
    return begin_of(g) + static_cast<std::uintptr_t>(g.numel) * dtype_size(g.dtype);
  };
  // Gradient lists are usually allocated in order: one pass, no allocation, settles that case.
  bool in_address_order = true;
  std::uintptr_t previous_end = 0;
  for (const GradSpan& g : grads) {
    if (g.numel <= 0) continue;
    if (begin_of(g) < previous_end) {
      in_address_order = false;
      break;
    }
    previous_end = end_of(g);
  }
  if (in_address_order) return false;

  struct Range {
    std::uintptr_t begin;
    std::uintptr_t end;
  };
  std::vector<Range> ranges;
  ranges.reserve(grads.size());
  for (const GradSpan& g : grads) {
    if (g.numel > 0) ranges.push_back({begin_of(g), end_of(g)});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) return true;
  }
  return false;
}

}  // namespace autocastgen::kernels
