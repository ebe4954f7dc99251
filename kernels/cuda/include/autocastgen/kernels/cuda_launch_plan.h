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

// Receives the launches of one call, one at a time, in the order they must be issued.
class CudaLaunchSink {
 public:
  // `chunks` (one dtype, at least one chunk) is valid only during the call.
  virtual void launch(DType dtype, std::span<const CudaChunk> chunks) = 0;

 protected:
  ~CudaLaunchSink() = default;
};

// Note [launch packing]
// Cuts every non-empty gradient into chunks of at most `chunk_elements` and packs the chunks into
// launches of one dtype each, at most buffer.size() chunks per launch. Normally gradients are
// grouped by dtype (float32, float16, bfloat16, float64) and packed densely, so a list of many
// small tensors needs few launches. With `in_order` (overlapping gradients, see
// grad_spans_overlap) each launch holds chunks of one gradient only and launches follow the list
// order, which the stream serialises.
// The chunks are written straight into `buffer` (the CUDA side passes the chunk array of its
// kernel-parameter block) and each full launch is handed to `sink`: nothing is allocated per call.
// Throws std::invalid_argument for chunk_elements < 1 or an empty buffer.
void pack_cuda_launches(std::span<const GradSpan> grads, std::int64_t chunk_elements,
                        std::span<CudaChunk> buffer, bool in_order, CudaLaunchSink& sink);

// Everything one unscale call does on the host before its launches, with the launches handed to
// `sink`: validates the list (messages start with `who`), tests it for overlap and packs it.
// kernels::cuda::non_finite_check_and_unscale is this plus the launches; tests and the benchmark
// run it with a sink of their own, without a GPU.
void prepare_unscale_launches(std::span<const GradSpan> grads, std::int64_t chunk_elements,
                              std::span<CudaChunk> buffer, CudaLaunchSink& sink, const char* who);

// A launch as a value, for tests and tools.
struct CudaLaunch {
  DType dtype = DType::Float32;
  std::vector<CudaChunk> chunks;
};

// pack_cuda_launches() collected into values, at most `max_chunks` chunks per launch.
// Throws std::invalid_argument for chunk_elements < 1 or max_chunks < 1.
std::vector<CudaLaunch> plan_cuda_launches(std::span<const GradSpan> grads,
                                           std::int64_t chunk_elements, std::size_t max_chunks,
                                           bool in_order);

}  // namespace autocastgen::kernels
