// CUDA kernels of the autocastgen scaler ops (TORCH_LIBRARY_IMPL for the CUDA dispatch key).
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "autocastgen/kernels/scaler_cuda.h"
#include "autocastgen/scaler/ops.h"
#include "scaler_glue.h"

namespace autocastgen::torch_glue {
namespace {

// Everything runs on PyTorch's current stream of the tensors' device, without host syncs.
void non_finite_check_and_unscale_cuda(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  check_unscale_scalars(found_inf, inv_scale, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(found_inf.device());
  StagedGrads staged(self, found_inf.device());
  kernels::cuda::non_finite_check_and_unscale(staged.spans(), found_inf.data_ptr<float>(),
                                              inv_scale.const_data_ptr<float>(),
                                              c10::cuda::getCurrentCUDAStream().stream());
  staged.copy_back();
}

at::Tensor& update_scale_cuda(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval) {
  const kernels::ScaleUpdateConfig cfg =
      check_update_args("autocastgen::update_scale_", self, growth_tracker, nullptr, found_inf, growth_factor,
                        backoff_factor, growth_interval, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(self.device());
  kernels::cuda::update_scale(self.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(), nullptr,
                              found_inf.const_data_ptr<float>(), cfg, c10::cuda::getCurrentCUDAStream().stream());
  return self;
}

at::Tensor& update_scale_hysteresis_cuda(at::Tensor& self, at::Tensor& growth_tracker,
                                         at::Tensor& hysteresis_tracker, const at::Tensor& found_inf,
                                         double growth_factor, double backoff_factor, int64_t growth_interval,
                                         int64_t hysteresis, double min_scale,
                                         std::optional<double> max_scale) {
  kernels::ScaleUpdateConfig cfg = check_update_args("autocastgen::update_scale_hysteresis_", self, growth_tracker,
                                                     &hysteresis_tracker, found_inf, growth_factor, backoff_factor,
                                                     growth_interval, c10::DeviceType::CUDA);
  ops::apply_update_extras(cfg, hysteresis, min_scale, max_scale);
  const c10::cuda::CUDAGuard guard(self.device());
  kernels::cuda::update_scale(self.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                              hysteresis_tracker.data_ptr<int32_t>(), found_inf.const_data_ptr<float>(), cfg,
                              c10::cuda::getCurrentCUDAStream().stream());
  return self;
}

}  // namespace
}  // namespace autocastgen::torch_glue

TORCH_LIBRARY_IMPL(autocastgen, CUDA, m) {
  m.impl("non_finite_check_and_unscale_", TORCH_FN(autocastgen::torch_glue::non_finite_check_and_unscale_cuda));
  m.impl("update_scale_", TORCH_FN(autocastgen::torch_glue::update_scale_cuda));
  m.impl("update_scale_hysteresis_", TORCH_FN(autocastgen::torch_glue::update_scale_hysteresis_cuda));
}
