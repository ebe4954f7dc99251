// autocastgen's own thread-local autocast state, AutocastScope and the worker-thread guard.
#include "autocastgen/runtime/state.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include "autocastgen/runtime/cast_cache.h"
#include "state_internal.h"

namespace autocastgen {
namespace {

constexpr size_t kDeviceTypes = static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
static_assert(kDeviceTypes <= 64, "AutocastStateGuard keeps one bit per device type");

// The device types that have an autocast dispatch key (the ones PyTorch's at::autocast knows).
std::optional<c10::DispatchKey> find_autocast_key(c10::DeviceType device) {
  switch (device) {
    case c10::DeviceType::CPU: return c10::DispatchKey::AutocastCPU;
    case c10::DeviceType::CUDA: return c10::DispatchKey::AutocastCUDA;
    case c10::DeviceType::MTIA: return c10::DispatchKey::AutocastMTIA;
    case c10::DeviceType::MAIA: return c10::DispatchKey::AutocastMAIA;
    case c10::DeviceType::XPU: return c10::DispatchKey::AutocastXPU;
    case c10::DeviceType::IPU: return c10::DispatchKey::AutocastIPU;
    case c10::DeviceType::HPU: return c10::DispatchKey::AutocastHPU;
    case c10::DeviceType::XLA: return c10::DispatchKey::AutocastXLA;
    case c10::DeviceType::MPS: return c10::DispatchKey::AutocastMPS;
    case c10::DeviceType::PrivateUse1: return c10::DispatchKey::AutocastPrivateUse1;
    default: return std::nullopt;
  }
}

AutocastState& thread_state() {
  thread_local AutocastState state;
  return state;
}

}  // namespace

namespace detail {

c10::DispatchKey autocast_key(c10::DeviceType device) {
  const std::optional<c10::DispatchKey> key = find_autocast_key(device);
  TORCH_CHECK(key.has_value(), "autocastgen: device type '", c10::DeviceTypeName(device, /*lower_case=*/true),
              "' has no autocast dispatch key");
  return *key;
}

const DeviceAutocastState& thread_device_state(c10::DeviceType device) { return thread_state().device(device); }

}  // namespace detail

c10::ScalarType default_lower_precision_dtype(c10::DeviceType device) {
  // PyTorch's defaults (the device table of docs/policy-language.md).
  switch (device) {
    case c10::DeviceType::CPU:
    case c10::DeviceType::HPU:
    case c10::DeviceType::XLA:
    case c10::DeviceType::MAIA: return c10::ScalarType::BFloat16;
    default: return c10::ScalarType::Half;
  }
}

bool is_autocast_enabled(c10::DeviceType device) { return thread_state().device(device).enabled; }

c10::ScalarType autocast_dtype(c10::DeviceType device) {
  const c10::ScalarType dtype = thread_state().device(device).dtype;
  return dtype == c10::ScalarType::Undefined ? default_lower_precision_dtype(device) : dtype;
}

bool is_autocast_cache_enabled(c10::DeviceType device) { return thread_state().device(device).cache_enabled; }

uint32_t autocast_nesting(c10::DeviceType device) { return thread_state().device(device).nesting; }

AutocastScope::AutocastScope(c10::DeviceType device, Options options) : device_(device) {
  const c10::DispatchKey key = detail::autocast_key(device);
  if (options.dtype.has_value())
    TORCH_CHECK(*options.dtype == c10::ScalarType::BFloat16 || *options.dtype == c10::ScalarType::Half,
                "autocastgen: the lower-precision dtype must be bfloat16 or float16, not ", *options.dtype);
  DeviceAutocastState& state = thread_state().device(device);
  previous_ = state;
  previous_key_excluded_ = c10::impl::tls_is_dispatch_key_excluded(key);
  state.enabled = options.enabled;
  if (options.dtype.has_value()) state.dtype = *options.dtype;
  state.cache_enabled = options.cache_enabled;
  ++state.nesting;
  // A disabled scope leaves the key alone: an enclosing torch.autocast may still need it, and the
  // wrappers see that autocastgen's state is off.
  if (options.enabled) c10::impl::tls_set_dispatch_key_excluded(key, false);
}

AutocastScope::~AutocastScope() {
  thread_state().device(device_) = previous_;
  c10::impl::tls_set_dispatch_key_excluded(detail::autocast_key(device_), previous_key_excluded_);
  if (previous_.nesting == 0) clear_cast_cache(device_);
}

AutocastState capture_autocast_state() { return thread_state(); }

AutocastStateGuard::AutocastStateGuard(const AutocastState& state) : previous_(thread_state()), previous_key_excluded_(0) {
  for (size_t i = 0; i < kDeviceTypes; ++i) {
    const auto device = static_cast<c10::DeviceType>(i);
    const std::optional<c10::DispatchKey> key = find_autocast_key(device);
    if (!key) continue;
    if (c10::impl::tls_is_dispatch_key_excluded(*key)) previous_key_excluded_ |= uint64_t{1} << i;
    if (state.device(device).enabled) c10::impl::tls_set_dispatch_key_excluded(*key, false);
  }
  thread_state() = state;
}

AutocastStateGuard::~AutocastStateGuard() {
  thread_state() = previous_;
  for (size_t i = 0; i < kDeviceTypes; ++i) {
    const auto device = static_cast<c10::DeviceType>(i);
    const std::optional<c10::DispatchKey> key = find_autocast_key(device);
    if (!key) continue;
    c10::impl::tls_set_dispatch_key_excluded(*key, (previous_key_excluded_ >> i) & 1U);
    // Casts made under the borrowed state belong to it, not to this thread's own scopes.
    if (previous_.device(device).nesting == 0) clear_cast_cache(device);
  }
}

}  // namespace autocastgen
