// Argument checks and gradient staging shared by the CPU and CUDA scaler op registrations.
#include "scaler_glue.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "kernel_dtype.h"

namespace autocastgen::torch_glue {
namespace {

constexpr const char* kUnscale = "autocastgen::non_finite_check_and_unscale_";

// The gradients' dtypes are checked before they are staged.
kernels::DType to_kernel_dtype(at::ScalarType t) {
  const std::optional<kernels::DType> dtype = kernel_dtype(t);
  TORCH_INTERNAL_ASSERT(dtype, "unchecked dtype ", t);
  return *dtype;
}

void check_one_element(const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK(t.numel() == 1, op, ": ", name, " must be a 1-element tensor, got ", t.numel(), " elements");
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be a ", dtype, " tensor, got ", t.scalar_type());
  TORCH_CHECK(t.layout() == at::kStrided, op, ": ", name, " must be a strided tensor, got layout ", t.layout());
}

}  // namespace

void check_unscale_scalars(const at::Tensor& found_inf, const at::Tensor& inv_scale, c10::DeviceType device_type) {
  check_one_element(kUnscale, "found_inf", found_inf, at::kFloat);
  check_one_element(kUnscale, "inv_scale", inv_scale, at::kFloat);
  TORCH_CHECK(found_inf.device().type() == device_type, kUnscale, ": found_inf is on ", found_inf.device(),
              ", expected a ", device_type, " tensor");
  TORCH_CHECK(inv_scale.device() == found_inf.device(), kUnscale, ": inv_scale is on ", inv_scale.device(),
              " but found_inf is on ", found_inf.device());
}

// Note [one pass over the gradients]
// A call often carries a thousand gradients, and each one's TensorImpl is a pointer chase, so the
// checks and the staging share one loop, read each property once and copy no at::Tensor (a copy
// is an atomic increment and decrement) unless the gradient needs a dense copy. Error messages
// are only built when a check fails (TORCH_CHECK formats lazily).
StagedGrads::StagedGrads(at::TensorList grads, c10::Device device) {
  spans_.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i];
    TORCH_CHECK(g.defined(), kUnscale, ": gradient ", i, " is an undefined tensor");
    TORCH_CHECK(g.device() == device, kUnscale, ": gradient ", i, " is on ", g.device(), " but found_inf is on ",
                device, "; call the op once per device");
    TORCH_CHECK(g.layout() == at::kStrided, kUnscale, ": gradient ", i, " has layout ", g.layout(),
                "; pass the values of a sparse gradient (grad._values()) instead");
    const auto t = g.scalar_type();
    TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble, kUnscale,
                ": gradient ", i, " has dtype ", t, "; supported dtypes are Float, Half, BFloat16 and Double");
    const int64_t numel = g.numel();
    if (numel == 0) continue;
    if (g.is_non_overlapping_and_dense()) {
      spans_.push_back({g.data_ptr(), numel, to_kernel_dtype(t)});
      continue;
    }
    TORCH_CHECK(at::has_internal_overlap(g) != at::MemOverlap::Yes, kUnscale, ": gradient ", i,
                " has elements that share memory (an expanded tensor?); it cannot be unscaled in place");
    at::Tensor dense = g.contiguous();
    spans_.push_back({dense.data_ptr(), numel, to_kernel_dtype(t)});
    staged_.emplace_back(g, std::move(dense));
  }
}

void StagedGrads::copy_back() {
  for (auto& [original, dense] : staged_) original.copy_(dense);
}

kernels::ScaleUpdateConfig check_update_args(const char* op, const at::Tensor& scale,
                                             const at::Tensor& growth_tracker,
                                             const at::Tensor* hysteresis_left, const at::Tensor& found_inf,
                                             double growth_factor, double backoff_factor,
                                             int64_t growth_interval, c10::DeviceType device_type) {
  check_one_element(op, "self (the scale)", scale, at::kFloat);
  check_one_element(op, "growth_tracker", growth_tracker, at::kInt);
  check_one_element(op, "found_inf", found_inf, at::kFloat);
  TORCH_CHECK(scale.device().type() == device_type, op, ": the scale is on ", scale.device(), ", expected a ",
              device_type, " tensor");
  TORCH_CHECK(growth_tracker.device() == scale.device(), op, ": growth_tracker is on ", growth_tracker.device(),
              " but the scale is on ", scale.device());
  TORCH_CHECK(found_inf.device() == scale.device(), op, ": found_inf is on ", found_inf.device(),
              " but the scale is on ", scale.device());
  if (hysteresis_left != nullptr) {
    check_one_element(op, "hysteresis_tracker", *hysteresis_left, at::kInt);
    TORCH_CHECK(hysteresis_left->device() == scale.device(), op, ": hysteresis_tracker is on ",
                hysteresis_left->device(), " but the scale is on ", scale.device());
  }
  kernels::ScaleUpdateConfig cfg;
  cfg.growth_factor = growth_factor;
  cfg.backoff_factor = backoff_factor;
  cfg.growth_interval = growth_interval;
  return cfg;
}

}  // namespace autocastgen::torch_glue
