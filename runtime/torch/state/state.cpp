// autocastgen's own thread-local autocast state, AutocastScope and the worker-thread guard.
#include "autocastgen/runtime/state.h"

#include <array>
#include <atomic>
#include <string>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include "autocastgen/runtime/cast_cache.h"
#include "policy/policy.h"
#include "state_internal.h"
#include "../device_types.h"

namespace autocastgen {
namespace {

static_assert(kDeviceTypes <= 64, "AutocastStateGuard keeps one bit per device type");

// The device types that have an autocast dispatch key: the ones PyTorch's at::autocast knows.
std::optional<c10::DispatchKey> find_autocast_key(c10::DeviceType device) {
  if (!at::autocast::is_autocast_available(device)) return std::nullopt;
  return at::autocast::get_autocast_dispatch_key_from_device_type(device);
}

AutocastState& thread_state() {
  thread_local AutocastState state;
  return state;
}

// Note [own scopes and PyTorch's state]
// PyTorch's autocast is "on" for a device exactly when the device's autocast dispatch key is
// included on the thread (torch.is_autocast_enabled reads the key). An enabled scope of ours must
// include it, or no wrapper would run; but then every kernel under the key runs, PyTorch's own
// included (every op no loaded policy of ours covers; every op when nothing is loaded), and those
// read PyTorch's dtype for the device, its cache flag and its cast cache. So that every op follows
// the scope, whoever's kernel runs:
//   - an enabled scope sets PyTorch's dtype for the device and its cache flag to the scope's, and
//     counts itself in PyTorch's nesting, whose outermost end clears PyTorch's cast cache (as
//     torch.autocast's does);
//   - a disabled scope excludes the key again when a scope of ours included it (no kernel under it
//     casts); when torch.autocast included it, the key stays, as that scope still needs it.
// Each restores what it changed. Which device keys a scope of ours included is this thread's
// `keys_ours` (one bit per device type).
uint64_t& keys_ours() {
  thread_local uint64_t bits = 0;
  return bits;
}

uint64_t bit_of(c10::DeviceType device) { return uint64_t{1} << static_cast<size_t>(device); }

// What an enabled scope or an installed state sets in PyTorch's state for `device`: its dtype and
// cache flag, and one more level of nesting. Returns PyTorch's dtype before; restore_torch undoes
// the rest (PyTorch's cache flag is one for all devices: the callers keep it). PyTorch's cast
// cache is keyed on the source tensor alone, so inside an open scope of another dtype it would hand
// out the outer scope's casts: such a scope runs with PyTorch's cache off.
c10::ScalarType mirror_onto_torch(c10::DeviceType device, c10::ScalarType dtype, bool cache_enabled) {
  const c10::ScalarType before = at::autocast::get_autocast_dtype(device);
  const bool nested = at::autocast::increment_nesting() > 1;
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_cache_enabled(cache_enabled && !(nested && before != dtype));
  return before;
}

void restore_torch(c10::DeviceType device, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

// Note [caches of a scope] in state_internal.h: the drops registered by rooms above the state.
// Zero-initialised before any static initialiser runs.
std::array<std::atomic<detail::ScopeCacheDrop>, 4> g_scope_cache_drops{};

// What lives as long as the outermost scope of a device: this thread's cast cache and what the
// rooms above registered (fp8's weight copies, Note [fp8 weight cache]).
void drop_scope_caches(c10::DeviceType device) {
  clear_cast_cache(device);
  for (const std::atomic<detail::ScopeCacheDrop>& slot : g_scope_cache_drops)
    if (const detail::ScopeCacheDrop drop = slot.load(std::memory_order_acquire)) drop(device);
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

void on_scope_end(ScopeCacheDrop drop) {
  for (std::atomic<ScopeCacheDrop>& slot : g_scope_cache_drops) {
    ScopeCacheDrop empty = nullptr;
    if (slot.compare_exchange_strong(empty, drop, std::memory_order_acq_rel)) return;
  }
  TORCH_CHECK(false, "autocastgen: no slot left for a cache of a scope (Note [caches of a scope])");
}

std::string qualified_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

}  // namespace detail

c10::ScalarType default_lower_precision_dtype(c10::DeviceType device) {
  // PyTorch's defaults, from the policy language's device table (one table for CLI and runtime),
  // looked up once per device type.
  static const std::array<c10::ScalarType, kDeviceTypes> defaults = [] {
    std::array<c10::ScalarType, kDeviceTypes> table;
    table.fill(c10::ScalarType::Half);
    for (size_t i = 0; i < kDeviceTypes; ++i) {
      const std::string name = c10::DeviceTypeName(static_cast<c10::DeviceType>(i), /*lower_case=*/true);
      for (const policy::DeviceInfo& info : policy::autocast_devices())
        if (info.device == name && info.default_dtype == "bfloat16") table[i] = c10::ScalarType::BFloat16;
    }
    return table;
  }();
  return defaults.at(static_cast<size_t>(device));
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
  previous_keys_ours_ = keys_ours();
  state.enabled = options.enabled;
  // Resolved here, so that the cache's hit path finds a concrete dtype inside every scope.
  if (options.dtype.has_value()) state.dtype = *options.dtype;
  else if (state.dtype == c10::ScalarType::Undefined) state.dtype = default_lower_precision_dtype(device);
  state.cache_enabled = options.cache_enabled;
  ++state.nesting;
  // Note [own scopes and PyTorch's state]
  if (options.enabled) {
    if (previous_key_excluded_) keys_ours() |= bit_of(device);
    c10::impl::tls_set_dispatch_key_excluded(key, false);
    previous_torch_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
    previous_torch_dtype_ = mirror_onto_torch(device, state.dtype, state.cache_enabled);
  } else if ((keys_ours() & bit_of(device)) != 0) {
    keys_ours() &= ~bit_of(device);
    c10::impl::tls_set_dispatch_key_excluded(key, true);
  }
}

AutocastScope::~AutocastScope() {
  const bool was_enabled = thread_state().device(device_).enabled;
  thread_state().device(device_) = previous_;
  c10::impl::tls_set_dispatch_key_excluded(detail::autocast_key(device_), previous_key_excluded_);
  keys_ours() = previous_keys_ours_;
  if (was_enabled) {
    at::autocast::set_autocast_cache_enabled(previous_torch_cache_enabled_);
    restore_torch(device_, previous_torch_dtype_);
  }
  if (previous_.nesting == 0) drop_scope_caches(device_);
}

AutocastState capture_autocast_state() { return thread_state(); }

AutocastStateGuard::AutocastStateGuard(const AutocastState& state)
    : previous_(thread_state()),
      previous_key_excluded_(0),
      previous_keys_ours_(keys_ours()),
      previous_torch_cache_enabled_(at::autocast::is_autocast_cache_enabled()) {
  for (size_t i = 0; i < kDeviceTypes; ++i) {
    const auto device = static_cast<c10::DeviceType>(i);
    const std::optional<c10::DispatchKey> key = find_autocast_key(device);
    if (!key) continue;
    const bool excluded = c10::impl::tls_is_dispatch_key_excluded(*key);
    if (excluded) previous_key_excluded_ |= uint64_t{1} << i;
    const DeviceAutocastState& installed = state.device(device);
    if (!installed.enabled) continue;
    // As an enabled scope does (Note [own scopes and PyTorch's state]).
    if (excluded) keys_ours() |= bit_of(device);
    c10::impl::tls_set_dispatch_key_excluded(*key, false);
    const c10::ScalarType dtype =
        installed.dtype == c10::ScalarType::Undefined ? default_lower_precision_dtype(device) : installed.dtype;
    previous_torch_dtypes_[i] = mirror_onto_torch(device, dtype, installed.cache_enabled);
    mirrored_ |= uint64_t{1} << i;
  }
  thread_state() = state;
}

AutocastStateGuard::~AutocastStateGuard() {
  thread_state() = previous_;
  keys_ours() = previous_keys_ours_;
  at::autocast::set_autocast_cache_enabled(previous_torch_cache_enabled_);
  for (size_t i = 0; i < kDeviceTypes; ++i) {
    const auto device = static_cast<c10::DeviceType>(i);
    const std::optional<c10::DispatchKey> key = find_autocast_key(device);
    if (!key) continue;
    c10::impl::tls_set_dispatch_key_excluded(*key, (previous_key_excluded_ >> i) & 1U);
    if (((mirrored_ >> i) & 1U) != 0) restore_torch(device, previous_torch_dtypes_[i]);
    // Casts made under the borrowed state belong to it, not to this thread's own scopes.
    if (previous_.device(device).nesting == 0) drop_scope_caches(device);
  }
}

}  // namespace autocastgen
