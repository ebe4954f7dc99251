// Host-side work list for the CUDA unscale kernel: gradients cut into chunks, chunks into launches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "autocastgen/kernels/grad_span.h"

namespace autocastgen::kernels {

// One CUDA block's work: `numel` consecutive elements from `data` (16 bytes, so a launch can
// carry many of them in its kernel parameters).
struct CudaChunk {
  void* data = nullptr;
  std::int64_t numel = 0;
};

// One kernel launch: chunks of a single dtype, at most the planner's `max_chunks`.
struct CudaLaunch {
  DType dtype = DType::Float32;
  std::vector<CudaChunk> chunks;
};

// Cuts every non-empty gradient into chunks of at most `chunk_elements` and packs the chunks into
// launches, one dtype per launch. Normally gradients are grouped by dtype (float32, float16,
// bfloat16, float64) and packed densely, so a list of many small tensors needs few launches.
// With `in_order` (overlapping gradients, see grad_spans_overlap) each launch holds chunks of
// one gradient only and launches follow the list order, which the stream serialises.
// Throws std::invalid_argument for chunk_elements < 1 or max_chunks < 1.
std::vector<CudaLaunch> plan_cuda_launches(std::span<const GradSpan> grads,
                                           std::int64_t chunk_elements, std::size_t max_chunks,
                                           bool in_order);

}  // namespace autocastgen::kernels
