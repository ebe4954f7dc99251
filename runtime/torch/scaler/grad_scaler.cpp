// autocastgen::GradScaler: scale / unscale_ / step / update / state dict, optional all-reduce of found_inf.
#include "autocastgen/scaler/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>

#include "autocastgen/scaler/ops.h"

namespace autocastgen {
namespace {

// One copy of `master` per device, made on first use (torch.amp's _MultiDeviceReplicator).
class PerDevice {
 public:
  explicit PerDevice(at::Tensor master) : master_(std::move(master)) {}
  const at::Tensor& get(const c10::Device& device) {
    for (auto& [d, t] : copies_) {
      if (d == device) return t;
    }
    copies_.emplace_back(device, master_.to(device, /*non_blocking=*/true));
    return copies_.back().second;
  }
  const std::vector<std::pair<c10::Device, at::Tensor>>& copies() const { return copies_; }

 private:
  at::Tensor master_;
  std::vector<std::pair<c10::Device, at::Tensor>> copies_;
};

bool has_key(const GradScalerState& d, const char* key) { return d.contains(c10::IValue(key)); }

double dict_double(const GradScalerState& d, const std::string& key) {
  TORCH_CHECK(d.contains(c10::IValue(key)), "GradScaler::load_state_dict: the state dict has no key '", key, "'");
  const c10::IValue& v = d.at(c10::IValue(key));
  TORCH_CHECK(v.isDouble() || v.isInt(), "GradScaler::load_state_dict: '", key, "' must be a number, got ",
              v.tagKind());
  return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
}

int64_t dict_int(const GradScalerState& d, const std::string& key) {
  TORCH_CHECK(d.contains(c10::IValue(key)), "GradScaler::load_state_dict: the state dict has no key '", key, "'");
  const c10::IValue& v = d.at(c10::IValue(key));
  TORCH_CHECK(v.isInt(), "GradScaler::load_state_dict: '", key, "' must be an int, got ", v.tagKind());
  return v.toInt();
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)),
      enabled_(options_.enabled()),
      init_scale_(options_.init_scale()),
      init_hysteresis_left_(options_.hysteresis()) {
  if (enabled_ && options_.device() == c10::DeviceType::CUDA && !::torch::cuda::is_available()) {
    TORCH_WARN("autocastgen::GradScaler is enabled for CUDA, but CUDA is not available; disabling it.");
    enabled_ = false;
  }
  if (!enabled_) return;
  TORCH_CHECK(options_.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1.0, got ",
              options_.growth_factor());
  TORCH_CHECK(options_.backoff_factor() < 1.0, "GradScaler: backoff_factor must be < 1.0, got ",
              options_.backoff_factor());
  kernels::ScaleUpdateConfig probe;  // validates hysteresis / min / max with the op's own check
  ops::apply_update_extras(probe, options_.hysteresis(), options_.min_scale(), options_.max_scale());
}

bool GradScaler::extras_enabled() const {
  return options_.hysteresis() != 1 || options_.min_scale() != 0.0 || !std::isinf(options_.max_scale());
}

void GradScaler::lazy_init(const c10::Device& device) {
  TORCH_INTERNAL_ASSERT(!growth_tracker_.defined(), "GradScaler: growth tracker initialized before the scale");
  const auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(device); };
  scale_ = at::full({}, init_scale_, on(at::kFloat));
  growth_tracker_ = at::full({}, init_growth_tracker_, on(at::kInt));
  hysteresis_left_ = at::full({}, init_hysteresis_left_, on(at::kInt));
}

void GradScaler::check_initialized(const char* function) const {
  TORCH_CHECK(scale_.defined() && growth_tracker_.defined(), "GradScaler::", function,
              ": the scale is not initialized; call scale(loss or outputs) earlier in the iteration");
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!enabled_) return outputs;
  if (!scale_.defined()) lazy_init(outputs.device());
  return outputs * scale_.to(outputs.device(), /*non_blocking=*/true);
}

std::vector<at::Tensor> GradScaler::scale(at::TensorList outputs) {
  if (!enabled_) return outputs.vec();
  std::vector<at::Tensor> result;
  result.reserve(outputs.size());
  std::optional<PerDevice> replicas;
  for (const at::Tensor& out : outputs) {
    if (!replicas) {
      if (!scale_.defined()) lazy_init(out.device());
      replicas.emplace(scale_);
    }
    result.push_back(out * replicas->get(out.device()));
  }
  return result;
}

void GradScaler::unscale_(::torch::optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_initialized("unscale_");
  OptimizerState& state = per_optimizer_[&optimizer];
  TORCH_CHECK(state.stage != Stage::Unscaled,
              "GradScaler::unscale_: unscale_() was already called for this optimizer since the last update()");
  TORCH_CHECK(state.stage != Stage::Stepped,
              "GradScaler::unscale_: called after step() for this optimizer; call update() first");

  // The reciprocal in double, as torch.amp does: a float division can be inexact under some
  // compile options.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  PerDevice inv_per_device(inv_scale);
  PerDevice found_per_device(at::zeros({}, scale_.options()));

  // Group by device; one op call per device handles every dtype (the kernels pack per dtype).
  std::vector<std::pair<c10::Device, std::vector<at::Tensor>>> by_device;
  {
    const at::NoGradGuard no_grad;  // like torch.no_grad() around the unscale
    for (auto& group : optimizer.param_groups()) {
      for (auto& param : group.params()) {
        at::Tensor& grad = param.mutable_grad();
        if (!grad.defined()) continue;
        TORCH_CHECK_VALUE(grad.scalar_type() != at::kHalf,
                          "GradScaler::unscale_: float16 gradients cannot be unscaled safely; keep the "
                          "optimizer's parameters in float32 (autocast casts them for the forward pass)");
        const at::Tensor to_unscale = grad.is_sparse() ? grad._values() : grad;
        auto it = std::find_if(by_device.begin(), by_device.end(),
                               [&](const auto& e) { return e.first == to_unscale.device(); });
        if (it == by_device.end()) {
          by_device.emplace_back(to_unscale.device(), std::vector<at::Tensor>{});
          it = std::prev(by_device.end());
        }
        it->second.push_back(to_unscale);
      }
    }
    for (auto& [device, grads] : by_device) {
      at::Tensor found = found_per_device.get(device);
      ops::non_finite_check_and_unscale_(grads, found, inv_per_device.get(device));
    }
  }

  state.found_inf_per_device.clear();
  for (const auto& [device, found] : found_per_device.copies()) state.found_inf_per_device.push_back(found);

  if (options_.process_group()) {
    // Note [distributed found_inf]
    // One collective per unscale_() on every rank, whatever devices (or no gradients at all) the
    // rank has: the per-device flags are summed on the scale's device, all-reduced with MAX, and
    // that one tensor becomes this optimizer's record. A rank without gradients thus still
    // takes part and skips exactly the steps the others skip.
    at::Tensor combined = at::zeros({}, scale_.options());
    for (const at::Tensor& f : state.found_inf_per_device) combined.add_(f.to(scale_.device()));
    std::vector<at::Tensor> tensors{combined};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    options_.process_group()->allreduce(tensors, opts)->wait();
    state.found_inf_per_device = {tensors[0]};
  }
  state.stage = Stage::Unscaled;
}

std::optional<at::Tensor> GradScaler::step(::torch::optim::Optimizer& optimizer) {
  if (!enabled_) return optimizer.step();
  check_initialized("step");
  OptimizerState& state = per_optimizer_[&optimizer];  // std::map: references stay valid
  TORCH_CHECK(state.stage != Stage::Stepped,
              "GradScaler::step: step() was already called for this optimizer since the last update()");
  if (state.stage == Stage::Ready) unscale_(optimizer);
  TORCH_CHECK(!state.found_inf_per_device.empty(),
              "GradScaler::step: no inf checks were recorded for this optimizer (none of its parameters has "
              "a gradient)");
  double found = 0.0;
  for (const at::Tensor& f : state.found_inf_per_device) found += f.item<double>();  // host sync, as in torch.amp
  std::optional<at::Tensor> result;
  if (found == 0.0) result = optimizer.step();
  state.stage = Stage::Stepped;
  return result;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_initialized("update");
  std::vector<at::Tensor> found_infs;
  for (const auto& [opt, state] : per_optimizer_) {
    for (const at::Tensor& f : state.found_inf_per_device) found_infs.push_back(f.to(scale_.device(), true));
  }
  TORCH_CHECK(!found_infs.empty(),
              "GradScaler::update: no inf checks were recorded in this iteration; call step() or unscale_() "
              "before update()");
  at::Tensor combined = found_infs[0].clone();
  for (size_t i = 1; i < found_infs.size(); ++i) combined.add_(found_infs[i]);
  if (extras_enabled()) {
    ops::update_scale_hysteresis_(scale_, growth_tracker_, hysteresis_left_, combined, options_.growth_factor(),
                                  options_.backoff_factor(), options_.growth_interval(), options_.hysteresis(),
                                  options_.min_scale(), options_.max_scale());  // inf: no cap
  } else {
    ops::update_scale_(scale_, growth_tracker_, combined, options_.growth_factor(), options_.backoff_factor(),
                       options_.growth_interval());
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_initialized("update");
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

void GradScaler::update(const at::Tensor& new_scale) {
  if (!enabled_) return;
  check_initialized("update");
  TORCH_CHECK(new_scale.defined() && new_scale.device().type() == options_.device() && new_scale.numel() == 1 &&
                  !new_scale.requires_grad(),
              "GradScaler::update: new_scale must be a float or a 1-element ", options_.device(),
              " tensor with requires_grad=False");
  scale_.copy_(new_scale.reshape({}));  // any 1-element shape (the scale is 0-dim)
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

int64_t GradScaler::get_hysteresis_left() const {
  if (!enabled_) return 0;
  return hysteresis_left_.defined() ? hysteresis_left_.item<int64_t>() : init_hysteresis_left_;
}

std::vector<at::Tensor> GradScaler::found_inf_per_device(const ::torch::optim::Optimizer& optimizer) const {
  const auto it = per_optimizer_.find(&optimizer);
  return it == per_optimizer_.end() ? std::vector<at::Tensor>{} : it->second.found_inf_per_device;
}

GradScalerState GradScaler::state_dict() const {
  // Values are floats and ints, so the dict is typed Dict[str, Any], like the Python one.
  GradScalerState d(c10::StringType::get(), c10::AnyType::get());
  if (!enabled_) return d;
  d.insert("scale", get_scale());
  d.insert("growth_factor", options_.growth_factor());
  d.insert("backoff_factor", options_.backoff_factor());
  d.insert("growth_interval", options_.growth_interval());
  d.insert("_growth_tracker", get_growth_tracker());
  if (extras_enabled()) {
    d.insert("hysteresis", options_.hysteresis());
    d.insert("_hysteresis_tracker", get_hysteresis_left());
    d.insert("min_scale", options_.min_scale());
    d.insert("max_scale", options_.max_scale());
  }
  return d;
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!enabled_) return;
  TORCH_CHECK(state.size() > 0,
              "GradScaler::load_state_dict: the state dict is empty (was it saved from a disabled GradScaler?)");
  // Read everything first, so a bad dict leaves the scaler unchanged.
  const double scale = dict_double(state, "scale");
  const double growth = dict_double(state, "growth_factor");
  const double backoff = dict_double(state, "backoff_factor");
  const int64_t interval = dict_int(state, "growth_interval");
  const int64_t tracker = dict_int(state, "_growth_tracker");
  int64_t hysteresis = 1;
  double min_scale = 0.0;
  double max_scale = std::numeric_limits<double>::infinity();
  if (has_key(state, "hysteresis")) hysteresis = dict_int(state, "hysteresis");
  if (has_key(state, "min_scale")) min_scale = dict_double(state, "min_scale");
  if (has_key(state, "max_scale")) max_scale = dict_double(state, "max_scale");
  int64_t hysteresis_left = hysteresis;
  if (has_key(state, "_hysteresis_tracker")) hysteresis_left = dict_int(state, "_hysteresis_tracker");
  kernels::ScaleUpdateConfig probe;
  ops::apply_update_extras(probe, hysteresis, min_scale, max_scale);

  options_.growth_factor(growth).backoff_factor(backoff).growth_interval(interval);
  options_.hysteresis(hysteresis).min_scale(min_scale).max_scale(max_scale);
  init_scale_ = scale;
  init_growth_tracker_ = tracker;
  init_hysteresis_left_ = hysteresis_left;
  if (scale_.defined()) scale_.fill_(scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(tracker);
  if (hysteresis_left_.defined()) hysteresis_left_.fill_(hysteresis_left);
}

}  // namespace autocastgen
