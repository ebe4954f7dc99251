// What the runtime does while torch.compile traces (docs/compile.md): it tells the Python package
// which reads a graph depends on, and gives it the key its guards compare.
#include <cstdint>
#include <optional>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/watch.h"
#include "state_internal.h"

namespace autocastgen::detail {

// Note [reads while tracing]
// torch.compile runs a model once on tensors without data and keeps the ops it reached; AOTAutograd
// replays Dynamo's graph the same way. A driver that reads autocastgen's state (or the insight
// switches) while tracing bakes what it read into the graph: casts or none, which dtype, whether
// calls are counted. Dynamo guards PyTorch's own autocast state, not ours, so a graph traced
// outside a scope would be reused inside one. Every driver call therefore checks, out of line,
// whether it is being traced (a TorchDispatchMode is active: FakeTensorMode, the proxy and
// functional modes of AOTAutograd), and if so calls the Python op autocastgen::trace_note_read,
// which adds one guard per traced frame comparing autocast_trace_key() at the frame's entry with
// its value at every later call (python/autocastgen/_traced.py). The op is called at the CPU key
// directly, past the active modes: it is bookkeeping, not part of the graph. Without the Python
// package the op does not exist and nothing is noted (C++ programs have no torch.compile).
bool is_traced(const at::Tensor& tensor) {
  return tensor.is_meta() || c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
         tensor.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

void note_driver_call_if_traced() {
  if (C10_LIKELY(c10::impl::TorchDispatchModeTLS::stack_len() == 0)) return;
  const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({"autocastgen::trace_note_read", ""});
  if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) return;
  op->typed<void()>().redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU));
}

namespace {

// Note [trace key]: what a traced graph may depend on, as one string Python compares cheaply:
// every device type whose autocastgen state is not the default (enabled, dtype, nesting, cache
// flag), the insight switch word (stats.h) and the watch's mode.
std::string trace_key() {
  const AutocastState state = capture_autocast_state();
  const DeviceAutocastState fresh;
  std::string key;
  for (int i = 0; i < static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES); ++i) {
    const DeviceAutocastState& device = state.device(static_cast<c10::DeviceType>(i));
    if (device.enabled == fresh.enabled && device.dtype == fresh.dtype && device.nesting == fresh.nesting &&
        device.cache_enabled == fresh.cache_enabled)
      continue;
    key += std::to_string(i) + ":" + (device.enabled ? "on:" : "off:") + std::to_string(static_cast<int>(device.dtype)) +
           ":" + std::to_string(device.nesting) + (device.cache_enabled ? ":cache;" : ":nocache;");
  }
  key += "active=" + std::to_string(stats::detail::active());
  key += ";finite=" + std::string(stats::finite_mode_name(stats::finite_mode()));
  return key;
}

}  // namespace
}  // namespace autocastgen::detail

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  m.def("autocast_trace_key() -> str", [] { return autocastgen::detail::trace_key(); });
}
