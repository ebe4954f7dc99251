// Builds the CUDA unscale work list on the host (plain C++, so CPU-only builds test it too).
#include "autocastgen/kernels/cuda_launch_plan.h"

#include <algorithm>
#include <string>

namespace autocastgen::kernels {
namespace {

// Fills the buffer chunk by chunk and hands it to the sink whenever it is full or the launch must
// end (dtype change, end of an in-order gradient).
class Packer {
 public:
  Packer(std::int64_t chunk_elements, std::span<CudaChunk> buffer, CudaLaunchSink& sink)
      : chunk_elements_(chunk_elements), buffer_(buffer), sink_(sink) {}

  void add(const GradSpan& g) {
    if (g.dtype != dtype_) flush();
    dtype_ = g.dtype;
    auto* base = static_cast<unsigned char*>(g.data);
    const std::size_t element = dtype_size(g.dtype);
    for (std::int64_t begin = 0; begin < g.numel; begin += chunk_elements_) {
      buffer_[used_++] = {base + static_cast<std::size_t>(begin) * element,
                          std::min(chunk_elements_, g.numel - begin)};
      if (used_ == buffer_.size()) flush();
    }
  }

  void flush() {
    if (used_ == 0) return;
    sink_.launch(dtype_, buffer_.first(used_));
    used_ = 0;
  }

 private:
  std::int64_t chunk_elements_;
  std::span<CudaChunk> buffer_;
  CudaLaunchSink& sink_;
  DType dtype_ = DType::Float32;
  std::size_t used_ = 0;
};

class CollectingSink final : public CudaLaunchSink {
 public:
  void launch(DType dtype, std::span<const CudaChunk> chunks) override {
    launches.push_back(CudaLaunch{dtype, {chunks.begin(), chunks.end()}});
  }
  std::vector<CudaLaunch> launches;
};

}  // namespace

void pack_cuda_launches(std::span<const GradSpan> grads, std::int64_t chunk_elements,
                        std::span<CudaChunk> buffer, bool in_order, CudaLaunchSink& sink) {
  if (chunk_elements < 1 || buffer.empty()) {
    throw_invalid_argument("autocastgen::kernels::pack_cuda_launches: chunk_elements (" +
                           std::to_string(chunk_elements) + ") and the buffer size (" +
                           std::to_string(buffer.size()) + ") must be at least 1");
  }
  Packer packer(chunk_elements, buffer, sink);
  if (in_order) {
    for (const GradSpan& g : grads) {
      if (g.numel == 0) continue;
      packer.add(g);
      packer.flush();
    }
    return;
  }
  // One pass finds the dtypes present; a list usually has one, so it is walked twice in all.
  unsigned present = 0;
  for (const GradSpan& g : grads) {
    if (g.numel > 0) present |= 1u << static_cast<unsigned>(g.dtype);
  }
  for (DType d : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    if ((present & (1u << static_cast<unsigned>(d))) == 0) continue;
    for (const GradSpan& g : grads) {
      if (g.dtype == d && g.numel > 0) packer.add(g);
    }
    packer.flush();
  }
}

void prepare_unscale_launches(std::span<const GradSpan> grads, std::int64_t chunk_elements,
                              std::span<CudaChunk> buffer, CudaLaunchSink& sink, const char* who) {
  validate_grad_spans(grads, who);
  pack_cuda_launches(grads, chunk_elements, buffer, grad_spans_overlap(grads), sink);
}

std::vector<CudaLaunch> plan_cuda_launches(std::span<const GradSpan> grads,
                                           std::int64_t chunk_elements, std::size_t max_chunks,
                                           bool in_order) {
  if (chunk_elements < 1 || max_chunks < 1) {
    throw_invalid_argument("autocastgen::kernels::plan_cuda_launches: chunk_elements (" +
                           std::to_string(chunk_elements) + ") and max_chunks (" +
                           std::to_string(max_chunks) + ") must be at least 1");
  }
  std::vector<CudaChunk> buffer(max_chunks);
  CollectingSink sink;
  pack_cuda_launches(grads, chunk_elements, buffer, in_order, sink);
  return std::move(sink.launches);
}

}  // namespace autocastgen::kernels
