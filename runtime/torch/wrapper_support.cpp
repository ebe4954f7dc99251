// The torch-state implementation of the wrapper helpers: PyTorch's own at::autocast state and cache.
#include "autocastgen/torch/wrapper_support.h"

#include <mutex>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "cast_each.h"

namespace autocastgen::torch {

WrapperTrace& wrapper_trace() {
  thread_local WrapperTrace trace;
  return trace;
}

bool is_eligible(const at::Tensor& tensor, c10::DeviceType device) { return at::autocast::is_eligible(tensor, device); }

namespace {

// One tensor, through this state's cache.
at::Tensor cast_one(const at::Tensor& tensor, at::ScalarType to, c10::DeviceType device) {
  return at::autocast::cached_cast(to, tensor, device);
}

}  // namespace

std::optional<at::Tensor> cast(const std::optional<at::Tensor>& tensor, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_optional(tensor, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

std::vector<at::Tensor> cast(at::TensorList tensors, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

std::vector<at::Tensor> cast(const at::ITensorListRef& tensors, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

c10::List<std::optional<at::Tensor>> cast(const c10::List<std::optional<at::Tensor>>& tensors, at::ScalarType to,
                                          c10::DeviceType device) {
  return detail::cast_each_optional(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
  return at::autocast::prioritize(current, tensor, device);
}

at::ScalarType promote(at::ScalarType current, at::TensorList tensors, c10::DeviceType device) {
  return at::autocast::prioritize(current, tensors, device);
}

at::ScalarType promote(at::ScalarType current, const at::ITensorListRef& tensors, c10::DeviceType device) {
  return at::autocast::prioritize(current, tensors, device);
}

at::ScalarType fp32_unless_ineligible(const at::Tensor& first, c10::DeviceType device) {
  return is_eligible(first, device) ? at::kFloat : first.scalar_type();
}

void raise_banned(const char* op, const char* message) { TORCH_CHECK(false, op, ": ", message); }

FallthroughRegistration::FallthroughRegistration(c10::DispatchKey key) {
  // Static initialisers of several generated libraries may race; the check and the registration
  // must be one step.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) return;
  library_ = std::make_unique<::torch::Library>(::torch::Library::IMPL, "_", key, __FILE__, __LINE__);
  library_->fallback(::torch::CppFunction::makeFallthrough());
}

FallthroughRegistration::~FallthroughRegistration() = default;

}  // namespace autocastgen::torch
