// C++ entry points of the scaler ops: typed dispatcher calls (so any registered device works).
#include "autocastgen/scaler/ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace autocastgen::ops {

void non_finite_check_and_unscale_(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("autocastgen::non_finite_check_and_unscale_", "")
                             .typed<void(at::TensorList, at::Tensor&, const at::Tensor&)>();
  op.call(grads, found_inf, inv_scale);
}

at::Tensor& update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                          double growth_factor, double backoff_factor, int64_t growth_interval) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("autocastgen::update_scale_", "")
          .typed<at::Tensor&(at::Tensor&, at::Tensor&, const at::Tensor&, double, double, int64_t)>();
  return op.call(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
}

at::Tensor& update_scale_hysteresis_(at::Tensor& scale, at::Tensor& growth_tracker, at::Tensor& hysteresis_tracker,
                                     const at::Tensor& found_inf, double growth_factor, double backoff_factor,
                                     int64_t growth_interval, int64_t hysteresis, double min_scale,
                                     std::optional<double> max_scale) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("autocastgen::update_scale_hysteresis_", "")
                             .typed<at::Tensor&(at::Tensor&, at::Tensor&, at::Tensor&, const at::Tensor&, double,
                                                double, int64_t, int64_t, double, std::optional<double>)>();
  return op.call(scale, growth_tracker, hysteresis_tracker, found_inf, growth_factor, backoff_factor,
                 growth_interval, hysteresis, min_scale, max_scale);
}

void apply_update_extras(kernels::ScaleUpdateConfig& cfg, int64_t hysteresis, double min_scale,
                         std::optional<double> max_scale_or_none) {
  const double max_scale = max_scale_or_none.value_or(std::numeric_limits<double>::infinity());
  TORCH_CHECK(hysteresis >= 1 && hysteresis <= std::numeric_limits<int32_t>::max(),
              "autocastgen scaler: hysteresis must be an integer >= 1 (1 turns it off), got ", hysteresis);
  TORCH_CHECK(!std::isnan(min_scale) && !std::isnan(max_scale) && min_scale >= 0.0 && min_scale <= max_scale,
              "autocastgen scaler: need 0 <= min_scale <= max_scale, got min_scale=", min_scale,
              " max_scale=", max_scale);
  cfg.hysteresis = static_cast<int32_t>(hysteresis);
  cfg.min_scale = static_cast<float>(min_scale);
  cfg.max_scale = static_cast<float>(max_scale);
}

}  // namespace autocastgen::ops
