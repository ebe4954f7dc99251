// Private helpers shared by the CPU and CUDA registrations of the scaler ops: checks and staging.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <vector>

#include "autocastgen/kernels/grad_span.h"
#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/kernels/scaler_update.h"

namespace autocastgen::torch_glue {

// The CPU kernel's executor: the kernel library's pool, within PyTorch's intra-op thread count
// (Note [CPU threads in the glue] in scaler_ops.cpp).
const kernels::Executor& cpu_executor();

// Checks found_inf and inv_scale of non_finite_check_and_unscale_ for a kernel on `device_type`
// (the gradients are checked by StagedGrads).
void check_unscale_scalars(const at::Tensor& found_inf, const at::Tensor& inv_scale, c10::DeviceType device_type);

// The gradients as dense spans, each checked on the way (defined, on `device`, strided, a
// supported dtype): one pass over the list (Note [one pass over the gradients]).
// Note [strided gradients]: a gradient whose elements fill a memory block without gaps
// (contiguous, channels-last, transposed, ...) is handed to the kernel as is, since the order of
// elements does not matter for an elementwise in-place op. Any other strided gradient (a slice
// with gaps) is unscaled through a dense copy that copy_back() writes into it afterwards. A
// gradient with internal overlap (expanded) is rejected: PyTorch's in-place ops reject writing it
// too. A failed check throws before any gradient is written.
class StagedGrads {
 public:
  StagedGrads(at::TensorList grads, c10::Device device);
  const std::vector<kernels::GradSpan>& spans() const { return spans_; }
  void copy_back();

 private:
  std::vector<kernels::GradSpan> spans_;
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;  // (original, dense copy)
};

// Checks the arguments of update_scale_ / update_scale_hysteresis_ (hysteresis_left may be
// undefined for the former) and returns the rule's configuration.
kernels::ScaleUpdateConfig check_update_args(const char* op, const at::Tensor& scale,
                                             const at::Tensor& growth_tracker,
                                             const at::Tensor* hysteresis_left, const at::Tensor& found_inf,
                                             double growth_factor, double backoff_factor,
                                             int64_t growth_interval, c10::DeviceType device_type);

}  // namespace autocastgen::torch_glue
