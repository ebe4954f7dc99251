// autocastgen::GradScaler: dynamic loss scaling for C++ training loops (torch.amp.GradScaler semantics).
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace autocastgen {

// A state dict: str keys, float or int values (c10's only dict type with mixed values).
using GradScalerState = c10::impl::GenericDict;

struct GradScalerOptions {
  // The device type the scaler is for (torch.amp.GradScaler's `device`). As there, a CUDA scaler
  // created where CUDA is unavailable warns and disables itself.
  TORCH_ARG(c10::DeviceType, device) = c10::DeviceType::CUDA;
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(double, growth_factor) = 2.0;   // must be > 1
  TORCH_ARG(double, backoff_factor) = 0.5;  // must be < 1
  TORCH_ARG(int64_t, growth_interval) = 2000;
  TORCH_ARG(bool, enabled) = true;
  // Extras, off by default (Note [hysteresis] in autocastgen/kernels/scaler_update.h): the N-th
  // overflow since the last growth backs off (1 = PyTorch's rule), and clamps on the scale.
  TORCH_ARG(int64_t, hysteresis) = 1;
  TORCH_ARG(double, min_scale) = 0.0;
  TORCH_ARG(double, max_scale) = std::numeric_limits<double>::infinity();
  // When set, unscale_() all-reduces found_inf (MAX) over this group, so every rank skips the same
  // steps and its scale follows the same trajectory. Every rank must call unscale_()/step() for
  // the same optimizers in the same order (one collective per call).
  TORCH_ARG(c10::intrusive_ptr<c10d::ProcessGroup>, process_group) = {};
};

// Usage per iteration (as with torch.amp.GradScaler):
//   auto loss = model(...);
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);      // optional, e.g. before clipping gradients
//   scaler.step(optimizer);          // skipped when a gradient has an inf/NaN
//   scaler.update();
// Gradients are unscaled with the autocastgen::non_finite_check_and_unscale_ op and the scale is
// updated with autocastgen::update_scale_ (or update_scale_hysteresis_ when an extra is set), so
// the scaler works on every device those ops are registered for (CPU, CUDA).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // outputs * scale. The scale tensor is created on the first call, on the output's device.
  at::Tensor scale(const at::Tensor& outputs);
  // Each output times the scale, the scale copied once per device.
  std::vector<at::Tensor> scale(at::TensorList outputs);

  // Divides the optimizer's gradients by the scale in place and records whether any is inf/NaN.
  // At most once per optimizer between update()s, and not after step(). Float16 gradients are
  // refused (c10::ValueError): unscaling them is unsafe, keep fp32 master parameters.
  void unscale_(::torch::optim::Optimizer& optimizer);

  // Unscales (unless unscale_() was called) and runs optimizer.step() unless an inf/NaN was found.
  // Returns what optimizer.step() returned, or nullopt when the step was skipped.
  std::optional<at::Tensor> step(::torch::optim::Optimizer& optimizer);

  // Updates the scale from the inf checks of this iteration (all optimizers), or sets it.
  void update();
  void update(double new_scale);
  void update(const at::Tensor& new_scale);  // 1 element, on the scaler's device type, no grad

  // The current scale (a host sync). Disabled: 1.0; before the first scale(): init_scale.
  double get_scale() const;
  // The scale tensor without a sync (undefined before the first scale() or when disabled).
  const at::Tensor& get_scale_async() const { return scale_; }
  double get_growth_factor() const { return options_.growth_factor(); }
  void set_growth_factor(double factor) { options_.growth_factor(factor); }
  double get_backoff_factor() const { return options_.backoff_factor(); }
  void set_backoff_factor(double factor) { options_.backoff_factor(factor); }
  int64_t get_growth_interval() const { return options_.growth_interval(); }
  void set_growth_interval(int64_t interval) { options_.growth_interval(interval); }
  int64_t get_growth_tracker() const;   // consecutive clean steps (0 when disabled)
  int64_t get_hysteresis_left() const;  // overflows still tolerated before a backoff
  bool is_enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return options_; }

  // found_inf per device recorded for this optimizer in the current iteration (after the
  // all-reduce when a process group is set); empty before unscale_().
  std::vector<at::Tensor> found_inf_per_device(const ::torch::optim::Optimizer& optimizer) const;

  // torch.amp.GradScaler's keys: "scale", "growth_factor", "backoff_factor" (floats),
  // "growth_interval", "_growth_tracker" (ints); plus "hysteresis", "_hysteresis_tracker",
  // "min_scale", "max_scale" only when an extra is set. Empty when disabled. Save it with
  // torch::pickle_save(c10::IValue(dict)); torch.load reads it to exchange it with Python.
  GradScalerState state_dict() const;
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    std::vector<at::Tensor> found_inf_per_device;
  };

  void lazy_init(const c10::Device& device);
  void check_initialized(const char* function) const;
  bool extras_enabled() const;

  GradScalerOptions options_;
  bool enabled_;
  double init_scale_;
  int64_t init_growth_tracker_ = 0;
  int64_t init_hysteresis_left_;
  at::Tensor scale_;            // float32, 1 element (0-dim)
  at::Tensor growth_tracker_;   // int32
  at::Tensor hysteresis_left_;  // int32
  // Keyed by optimizer address, like Python's id(optimizer); cleared by update().
  std::map<const ::torch::optim::Optimizer*, OptimizerState> per_optimizer_;
};

}  // namespace autocastgen
