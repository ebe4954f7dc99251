// autocastgen's own autocast state: per device type and per thread, whether autocast is on, its
// lower-precision dtype, the scope nesting depth and whether casts are cached. Wrappers generated
// with `--state autocastgen` and the runtime-policy kernels read it (docs/runtime.md).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>

namespace autocastgen {

// The state of one device type on one thread.
struct DeviceAutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: the device's default
  uint32_t nesting = 0;                                // AutocastScopes open on this thread
  bool cache_enabled = true;
};

// A copy of one thread's state for every device type: what capture_autocast_state() returns and
// AutocastStateGuard installs on another thread.
class AutocastState {
 public:
  [[nodiscard]] const DeviceAutocastState& device(c10::DeviceType type) const {
    return devices_.at(static_cast<size_t>(type));
  }
  DeviceAutocastState& device(c10::DeviceType type) { return devices_.at(static_cast<size_t>(type)); }

 private:
  std::array<DeviceAutocastState, static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)> devices_{};
};

// The lower-precision dtype a device uses when no scope names one: PyTorch's default for the
// device (bfloat16 on CPU, HPU, XLA and MAIA; float16 elsewhere).
[[nodiscard]] TORCH_API c10::ScalarType default_lower_precision_dtype(c10::DeviceType device);

// This thread's state for `device`.
[[nodiscard]] TORCH_API bool is_autocast_enabled(c10::DeviceType device);
[[nodiscard]] TORCH_API c10::ScalarType autocast_dtype(c10::DeviceType device);
[[nodiscard]] TORCH_API bool is_autocast_cache_enabled(c10::DeviceType device);
[[nodiscard]] TORCH_API uint32_t autocast_nesting(c10::DeviceType device);

// Turns autocast on (or, with enabled = false, off) for `device` on this thread until the scope
// ends, and restores the previous state on every exit path. Scopes nest; when the outermost scope
// of a device ends, this thread's cast cache for that device is cleared. While autocast is on, the
// device's autocast dispatch key is included on this thread so the wrappers run, and PyTorch's
// dtype for the device and its cache flag are the scope's, so that PyTorch's own kernels under the
// key follow the scope too (Note [own scopes and PyTorch's state] in state.cpp). A disabled scope
// inside one of ours excludes the key again.
// Throws c10::Error for a device without an autocast dispatch key or a dtype that is not
// float16/bfloat16.
class TORCH_API AutocastScope {
 public:
  struct Options {
    std::optional<c10::ScalarType> dtype;  // default: the enclosing scope's, else the device default
    bool enabled = true;
    bool cache_enabled = true;

    // `Options().disabled().without_cache()`: reads like the designated form
    // `{.enabled = false, .cache_enabled = false}`, which gcc 12's -Wextra warns about.
    Options& with_dtype(c10::ScalarType value) {
      dtype = value;
      return *this;
    }
    Options& disabled() {
      enabled = false;
      return *this;
    }
    Options& without_cache() {
      cache_enabled = false;
      return *this;
    }
  };
  explicit AutocastScope(c10::DeviceType device) : AutocastScope(device, Options{}) {}
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype) : AutocastScope(device, Options{dtype}) {}
  AutocastScope(c10::DeviceType device, Options options);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  DeviceAutocastState previous_;
  bool previous_key_excluded_;
  // What an enabled scope changed in PyTorch's state (Note [own scopes and PyTorch's state]).
  uint64_t previous_keys_ours_;
  c10::ScalarType previous_torch_dtype_ = c10::ScalarType::Undefined;
  bool previous_torch_cache_enabled_ = true;
};

// Carrying the state into other threads (thread pools, hand-made workers): capture on the
// submitting thread, install with AutocastStateGuard on the worker. The guard restores the
// worker's own state when it ends (and clears the worker's cache for devices it leaves off).
[[nodiscard]] TORCH_API AutocastState capture_autocast_state();

class TORCH_API AutocastStateGuard {
 public:
  explicit AutocastStateGuard(const AutocastState& state);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  AutocastState previous_;
  uint64_t previous_key_excluded_;  // one bit per device type
  uint64_t previous_keys_ours_;
  // PyTorch's state for the devices the installed state enables (Note [own scopes and PyTorch's state]).
  bool previous_torch_cache_enabled_;
  uint64_t mirrored_ = 0;
  std::array<c10::ScalarType, static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)>
      previous_torch_dtypes_{};
};

// Wraps `fn` so that it runs under the state captured now, whichever thread calls it:
//   pool.submit(autocastgen::with_autocast_state([&] { model.forward(x); }));
template <typename Fn>
[[nodiscard]] auto with_autocast_state(Fn fn) {
  return [state = capture_autocast_state(), fn = std::move(fn)](auto&&... args) mutable -> decltype(auto) {
    const AutocastStateGuard guard(state);
    return fn(std::forward<decltype(args)>(args)...);
  };
}

}  // namespace autocastgen
