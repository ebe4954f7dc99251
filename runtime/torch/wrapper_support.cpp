// The torch-state implementation of the wrapper helpers: PyTorch's own at::autocast state and cache.
#include "autocastgen/torch/wrapper_support.h"

#include <mutex>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace autocastgen::torch {

WrapperTrace& wrapper_trace() {
  thread_local WrapperTrace trace;
  return trace;
}

bool is_eligible(const at::Tensor& tensor, c10::DeviceType device) { return at::autocast::is_eligible(tensor, device); }

std::optional<at::Tensor> cast(const std::optional<at::Tensor>& tensor, at::ScalarType to, c10::DeviceType device) {
  if (!tensor.has_value()) return std::nullopt;
  return at::autocast::cached_cast(to, *tensor, device);
}

std::vector<at::Tensor> cast(at::TensorList tensors, at::ScalarType to, c10::DeviceType device) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(at::autocast::cached_cast(to, t, device));
  return out;
}

std::vector<at::Tensor> cast(const at::ITensorListRef& tensors, at::ScalarType to, c10::DeviceType device) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(at::autocast::cached_cast(to, t, device));
  return out;
}

c10::List<std::optional<at::Tensor>> cast(const c10::List<std::optional<at::Tensor>>& tensors, at::ScalarType to,
                                          c10::DeviceType device) {
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(tensors.size());
  for (const std::optional<at::Tensor>& t : tensors) out.push_back(cast(t, to, device));
  return out;
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
