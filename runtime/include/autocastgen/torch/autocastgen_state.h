// What wrappers generated with `--state autocastgen` call: the same functions as
// autocastgen::torch (wrapper_support.h), reading autocastgen's own thread-local state and cast
// cache (autocastgen/runtime/) instead of PyTorch's at::autocast.
#pragma once

#include <initializer_list>
#include <memory>
#include <string_view>

#include <autocastgen/runtime/cast_cache.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/wrapper_support.h>

namespace autocastgen::torch::autocastgen_state {

// State-independent helpers are shared with the torch-state wrappers.
using ::autocastgen::torch::fp32_if_unset;
using ::autocastgen::torch::fp32_unless_ineligible;
using ::autocastgen::torch::is_eligible;
using ::autocastgen::torch::raise_banned;
using ::autocastgen::torch::WrapperScope;

// The dispatch key is also included while torch.autocast is on; the wrappers act only when
// autocastgen's state says so.
inline bool is_enabled(c10::DeviceType device) { return ::autocastgen::is_autocast_enabled(device); }
inline at::ScalarType lower_precision_dtype(c10::DeviceType device) { return ::autocastgen::autocast_dtype(device); }

inline at::Tensor cast(const at::Tensor& tensor, at::ScalarType to, c10::DeviceType device) {
  return ::autocastgen::cached_cast(to, tensor, device);
}
std::optional<at::Tensor> cast(const std::optional<at::Tensor>& tensor, at::ScalarType to, c10::DeviceType device);
std::vector<at::Tensor> cast(at::TensorList tensors, at::ScalarType to, c10::DeviceType device);
std::vector<at::Tensor> cast(const at::ITensorListRef& tensors, at::ScalarType to, c10::DeviceType device);
c10::List<std::optional<at::Tensor>> cast(const c10::List<std::optional<at::Tensor>>& tensors, at::ScalarType to,
                                          c10::DeviceType device);

// Note [promote semantics] (wrapper_support.h), with autocastgen's lower-precision dtype.
at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device);
at::ScalarType promote(at::ScalarType current, at::TensorList tensors, c10::DeviceType device);
at::ScalarType promote(at::ScalarType current, const at::ITensorListRef& tensors, c10::DeviceType device);
inline at::ScalarType promote(at::ScalarType current, const std::optional<at::Tensor>&, c10::DeviceType) { return current; }
inline at::ScalarType promote(at::ScalarType current, const c10::List<std::optional<at::Tensor>>&, c10::DeviceType) {
  return current;
}

// Note [claiming the key]: a library generated with `--state autocastgen` owns its dispatch key.
// Kernels that others (PyTorch) registered there for ops the policy leaves out would cast by
// PyTorch's state whenever an AutocastScope includes the key; they are replaced by fallthroughs,
// so unlisted ops run untouched. Ops given a runtime policy are left alone. Lives as long as the
// generated library.
class DispatchKeyClaim {
 public:
  DispatchKeyClaim(c10::DispatchKey key, std::initializer_list<std::string_view> listed_ops);
  ~DispatchKeyClaim();
  DispatchKeyClaim(const DispatchKeyClaim&) = delete;
  DispatchKeyClaim& operator=(const DispatchKeyClaim&) = delete;

 private:
  std::vector<std::unique_ptr<::torch::Library>> libraries_;  // one per namespace
};

}  // namespace autocastgen::torch::autocastgen_state
