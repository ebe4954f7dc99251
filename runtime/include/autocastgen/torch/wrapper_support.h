// What generated torch-target wrappers call: eligibility, casts through PyTorch's autocast cache,
// promotion, dtype helpers, banned-op errors and the fallthrough registration. Kept light (no
// ATen/ATen.h) so generated files compile fast; the work happens in wrapper_support.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace torch {
class Library;
}

// Exported by libtorch_cpu and declared in ATen/autocast_mode.h; declared again here (same
// signatures) so generated files can call them inline without including that heavy header.
namespace at::autocast {
TORCH_API at::ScalarType get_autocast_dtype(at::DeviceType device_type);
TORCH_API at::Tensor cached_cast(at::ScalarType to_type, const at::Tensor& arg, c10::DeviceType device_type);
}  // namespace at::autocast

namespace autocastgen::torch {

// Which generated wrapper ran last on this thread, and how many have run: lets tests prove that
// our kernels (not PyTorch's built-in ones) handled a call. One thread-local store per call.
struct WrapperTrace {
  const char* last_op = nullptr;
  uint64_t calls = 0;
};
WrapperTrace& wrapper_trace();

// Held by every wrapper for its whole body: the autocast key is excluded so the inner call
// reaches the backend kernel, and the call is traced.
class WrapperScope {
 public:
  WrapperScope(c10::DispatchKey autocast_key, const char* op) : guard_(autocast_key) {
    WrapperTrace& trace = wrapper_trace();
    trace.last_op = op;
    ++trace.calls;
  }

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// The current lower-precision dtype of `device` (torch.autocast's dtype).
inline at::ScalarType lower_precision_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }

// Note [eligible argument]: defined, floating point, on the policy's device, not float64.
bool is_eligible(const at::Tensor& tensor, c10::DeviceType device);

// Casts eligible tensors to `to` (through PyTorch's autocast cast cache); others pass unchanged.
inline at::Tensor cast(const at::Tensor& tensor, at::ScalarType to, c10::DeviceType device) {
  return at::autocast::cached_cast(to, tensor, device);
}
std::optional<at::Tensor> cast(const std::optional<at::Tensor>& tensor, at::ScalarType to, c10::DeviceType device);
std::vector<at::Tensor> cast(at::TensorList tensors, at::ScalarType to, c10::DeviceType device);
std::vector<at::Tensor> cast(const at::ITensorListRef& tensors, at::ScalarType to, c10::DeviceType device);
c10::List<std::optional<at::Tensor>> cast(const c10::List<std::optional<at::Tensor>>& tensors, at::ScalarType to,
                                          c10::DeviceType device);

// Note [promote semantics]: the widest floating type among the eligible Tensor and Tensor[]
// arguments, starting from the lower-precision dtype; float64 is ignored and mixing float16 with
// bfloat16 is an error. As in PyTorch, optional tensors do not take part (they are still cast).
at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device);
at::ScalarType promote(at::ScalarType current, at::TensorList tensors, c10::DeviceType device);
at::ScalarType promote(at::ScalarType current, const at::ITensorListRef& tensors, c10::DeviceType device);
inline at::ScalarType promote(at::ScalarType current, const std::optional<at::Tensor>&, c10::DeviceType) { return current; }
inline at::ScalarType promote(at::ScalarType current, const c10::List<std::optional<at::Tensor>>&, c10::DeviceType) {
  return current;
}

// fp32_set_opt_dtype: an unset dtype becomes float32.
inline std::optional<at::ScalarType> fp32_if_unset(const std::optional<at::ScalarType>& dtype) {
  return dtype.has_value() ? dtype : std::optional<at::ScalarType>(at::kFloat);
}
// fp32_append_dtype: float32, or the first argument's own dtype when it is not eligible.
at::ScalarType fp32_unless_ineligible(const at::Tensor& first, c10::DeviceType device);

// banned: raises c10::Error with the policy's message.
[[noreturn]] void raise_banned(const char* op, const char* message);

// Registers a fallthrough fallback for `key` unless one exists already (PyTorch owns the
// fallback of most autocast keys); the registration lives as long as this object.
class FallthroughRegistration {
 public:
  explicit FallthroughRegistration(c10::DispatchKey key);
  ~FallthroughRegistration();
  FallthroughRegistration(const FallthroughRegistration&) = delete;
  FallthroughRegistration& operator=(const FallthroughRegistration&) = delete;
  [[nodiscard]] bool registered() const { return library_ != nullptr; }

 private:
  std::unique_ptr<::torch::Library> library_;
};

}  // namespace autocastgen::torch
