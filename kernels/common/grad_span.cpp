// Gradient lists: messages for invalid spans, and the overlap test (parallel or in-order work).
#include "autocastgen/kernels/grad_span.h"

#include <algorithm>
#include <string>
#include <vector>

namespace autocastgen::kernels {

void throw_invalid_grad_span(std::span<const GradSpan> grads, std::size_t index, const char* who,
                             CallSite where) {
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

// Note [overlap test]
// Two spans overlap iff, sorted by start, one starts before its predecessor ends. Lists come in
// runs of increasing addresses (an allocator hands out a segment's blocks in order, and a new
// segment may lie anywhere), so instead of sorting the whole list the test checks each run on the
// way and merges the runs pairwise: one pass and no allocation for a list in address order,
// O(n log runs) otherwise (a thousand CUDA gradients of 16 KB sit in about eight 2 MB segments).
bool grad_spans_overlap(std::span<const GradSpan> grads) {
  struct Range {
    std::uintptr_t begin;
    std::uintptr_t end;
  };
  const auto range_of = [](const GradSpan& g) {
    const auto begin = reinterpret_cast<std::uintptr_t>(g.data);
    return Range{begin, begin + static_cast<std::uintptr_t>(g.numel) * dtype_size(g.dtype)};
  };
  // First pass: is the list one run? A span that starts inside its predecessor overlaps it.
  std::size_t breaks = 0;
  Range previous{0, 0};
  for (const GradSpan& g : grads) {
    if (g.numel <= 0) continue;
    const Range r = range_of(g);
    if (r.begin < previous.begin) {
      ++breaks;
    } else if (r.begin < previous.end) {
      return true;
    }
    previous = r;
  }
  if (breaks == 0) return false;

  // Runs of increasing starts, each already free of overlaps; merge them pairwise.
  std::vector<Range> ranges;
  ranges.reserve(grads.size());
  std::vector<std::size_t> run_starts;
  run_starts.reserve(breaks + 2);
  for (const GradSpan& g : grads) {
    if (g.numel <= 0) continue;
    const Range r = range_of(g);
    if (ranges.empty() || r.begin < ranges.back().begin) run_starts.push_back(ranges.size());
    ranges.push_back(r);
  }
  run_starts.push_back(ranges.size());
  const auto by_begin = [](const Range& a, const Range& b) { return a.begin < b.begin; };
  std::vector<Range> merged(ranges.size());
  while (run_starts.size() > 2) {
    std::vector<std::size_t> next_starts;
    next_starts.reserve(run_starts.size() / 2 + 2);
    std::size_t r = 0;
    for (; r + 2 < run_starts.size(); r += 2) {
      next_starts.push_back(run_starts[r]);
      std::merge(ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r]),
                 ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r + 1]),
                 ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r + 1]),
                 ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r + 2]),
                 merged.begin() + static_cast<std::ptrdiff_t>(run_starts[r]), by_begin);
    }
    if (r + 1 < run_starts.size()) {  // an odd run out: carried over as it is
      next_starts.push_back(run_starts[r]);
      std::copy(ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r]),
                ranges.begin() + static_cast<std::ptrdiff_t>(run_starts[r + 1]),
                merged.begin() + static_cast<std::ptrdiff_t>(run_starts[r]));
    }
    next_starts.push_back(ranges.size());
    ranges.swap(merged);
    run_starts.swap(next_starts);
  }
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) return true;
  }
  return false;
}

}  // namespace autocastgen::kernels
