// Builds the CUDA unscale work list on the host (plain C++, so CPU-only builds test it too).
#include "autocastgen/kernels/cuda_launch_plan.h"

#include <algorithm>
#include <string>

namespace autocastgen::kernels {
namespace {

class Packer {
 public:
  Packer(std::int64_t chunk_elements, std::size_t max_chunks)
      : chunk_elements_(chunk_elements), max_chunks_(max_chunks) {}

  void add(const GradSpan& g) {
    auto* base = static_cast<unsigned char*>(g.data);
    for (std::int64_t begin = 0; begin < g.numel; begin += chunk_elements_) {
      if (launches_.empty() || launches_.back().dtype != g.dtype ||
          launches_.back().chunks.size() == max_chunks_) {
        launches_.push_back(CudaLaunch{g.dtype, {}});
        launches_.back().chunks.reserve(max_chunks_);
      }
      launches_.back().chunks.push_back(
          {base + static_cast<std::size_t>(begin) * dtype_size(g.dtype),
           std::min(chunk_elements_, g.numel - begin)});
    }
  }
  std::vector<CudaLaunch> take() { return std::move(launches_); }

 private:
  std::int64_t chunk_elements_;
  std::size_t max_chunks_;
  std::vector<CudaLaunch> launches_;
};

}  // namespace

std::vector<CudaLaunch> plan_cuda_launches(std::span<const GradSpan> grads,
                                           std::int64_t chunk_elements, std::size_t max_chunks,
                                           bool in_order) {
  if (chunk_elements < 1 || max_chunks < 1) {
    throw_invalid_argument("autocastgen::kernels::plan_cuda_launches: chunk_elements (" +
                           std::to_string(chunk_elements) + ") and max_chunks (" +
                           std::to_string(max_chunks) + ") must be at least 1");
  }
  std::vector<CudaLaunch> launches;
  if (in_order) {
    for (const GradSpan& g : grads) {
      if (g.numel == 0) continue;
      Packer one(chunk_elements, max_chunks);
      one.add(g);
      for (CudaLaunch& l : one.take()) launches.push_back(std::move(l));
    }
    return launches;
  }
  Packer packer(chunk_elements, max_chunks);
  for (DType d : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    for (const GradSpan& g : grads) {
      if (g.dtype == d && g.numel > 0) packer.add(g);
    }
  }
  return packer.take();
}

}  // namespace autocastgen::kernels
