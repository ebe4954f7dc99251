// C++ entry points of the autocastgen scaler ops (calls through the dispatcher, any device).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "autocastgen/kernels/scaler_update.h"

namespace autocastgen::ops {

// autocastgen::non_finite_check_and_unscale_: the schema of
// aten::_amp_foreach_non_finite_check_and_unscale_. Every gradient is multiplied in place by
// inv_scale; found_inf (1 element, float32) is set to 1 when any input element is inf or NaN.
// Gradients: float32, float16, bfloat16 or float64, any strides, all on found_inf's device.
void non_finite_check_and_unscale_(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale);

// autocastgen::update_scale_: the schema and rule of aten::_amp_update_scale_.
at::Tensor& update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval);

// autocastgen::update_scale_hysteresis_: the same plus Note [hysteresis] (scaler_update.h):
// hysteresis_tracker (1 element, int32) holds the overflows still tolerated; max_scale None: no cap.
at::Tensor& update_scale_hysteresis_(at::Tensor& scale, at::Tensor& growth_tracker, at::Tensor& hysteresis_tracker,
                                     const at::Tensor& found_inf, double growth_factor, double backoff_factor,
                                     int64_t growth_interval, int64_t hysteresis = 1, double min_scale = 0.0,
                                     std::optional<double> max_scale = std::nullopt);

// Validates the extras (hysteresis >= 1, 0 <= min_scale <= max_scale, no NaN) and stores them in cfg.
void apply_update_extras(kernels::ScaleUpdateConfig& cfg, int64_t hysteresis, double min_scale,
                         std::optional<double> max_scale);

}  // namespace autocastgen::ops
