// What the runtime does while torch.compile traces (docs/compile.md): it tells the Python package
// which reads a graph depends on, and gives it the key its guards compare. What the statistics and
// the watch put into traced graphs is the insight's: Note [insight in compiled code] in
// insight/traced_calls.cpp.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/switches.h"
#include "state_internal.h"
#include "bookkeeping_op.h"
#include "python_op.h"

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
// its value at every later call (python/autocastgen/_core/traced.py). The op is called at the CPU key
// directly, past the active modes: it is bookkeeping, not part of the graph. Without the Python
// package the op does not exist and nothing is noted (C++ programs have no torch.compile).
bool is_traced(const at::Tensor& tensor) {
  return tensor.is_meta() ||
         tensor.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

namespace {
thread_local bool t_compiling = false;  // the current driver call is traced by torch.compile
}  // namespace

// The flag is the current driver call's; the mode check keeps a compiled graph's own ops (which
// run after the trace, with no mode) from reading one left by the trace's last call.
bool compiling_call() { return t_compiling && c10::impl::TorchDispatchModeTLS::stack_len() > 0; }

// Note [the backward a trace puts in the forward's scope]
// Eager code runs its backward outside the autocast scope (PyTorch's advice; the autograd engine
// runs it where backward() is called), so a backward op never reaches a driver. AOTAutograd traces
// a compiled training step's backward inside the forward's autocast state
// (torch._functorch.config.backward_pass_autocast, "same_as_forward" by default): there the
// drivers would decide the backward's GEMMs (in fp8, under an fp8 list naming mm) and count them,
// which eager never does. trace_note_read answers 2 for a call traced in such a backward (Python
// sees AOTAutograd's backward tag, or an autograd node running, with that option at its default),
// and the call runs untouched and uncounted, as eager's. An option set to a list of autocast
// arguments is an explicit wish for autocast in the backward: the drivers act there.
//
// No store on the eager path: compiling_call() also asks for an active mode, and every call made
// under one sets the flag afresh.
bool note_driver_call_if_traced() {
  if (C10_LIKELY(c10::impl::TorchDispatchModeTLS::stack_len() == 0)) return false;
  const int64_t noted = call_python<int64_t>("autocastgen::trace_note_read").value_or(0);
  t_compiling = noted != 0;
  return noted == 2;
}

// Note [policies in the trace key]
// A traced graph holds the casts of the policies in force when it was traced: loading another
// runtime policy (or a generated library) after compiling must not reuse it, in this process
// (Dynamo's guards) or in the next one (AOTAutograd's cache looks graphs up by a key that holds
// Dynamo's graph, the same for any policy, and the trace key: Note [the state in compile cache
// keys] in python/autocastgen/_core/traced.py). So the key names the policies by content, not by a
// counter another process would repeat: a 64-bit FNV-1a digest over the descriptions of the
// runtime policies installed since the last clear, in order (the same loads give the same key;
// other loads that end in the same table only trace again), and one over the identities of the
// generated libraries loaded, in any order. Not a cryptographic hash: the runtime would link
// libcrypto for it, and the key only tells policy sets apart. Frames that reached no wrapper get
// no guard, so every change here also drops Dynamo's compiled code (drop_compiled_graphs), however
// it came: load_policy, the op beneath it, AUTOCASTGEN_POLICY, a library loaded after compiling.
namespace {
constexpr uint64_t kFnvOffset = 14695981039346656037ULL;

uint64_t fnv1a(uint64_t digest, std::string_view text) {
  for (const char c : text) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return digest;
}

std::mutex g_policies_mutex;
uint64_t g_runtime_policies = kFnvOffset;      // guarded by g_policies_mutex
std::set<std::string> g_generated_libraries;  // guarded by g_policies_mutex

std::string policies_key() {
  const std::lock_guard<std::mutex> lock(g_policies_mutex);
  uint64_t generated = kFnvOffset;
  for (const std::string& identity : g_generated_libraries) generated = fnv1a(fnv1a(generated, identity), "\n");
  char text[40];
  std::snprintf(text, sizeof text, "%016llx:%016llx", static_cast<unsigned long long>(g_runtime_policies),
                static_cast<unsigned long long>(generated));
  return text;
}
}  // namespace

void drop_compiled_graphs() { (void)call_python<bool>("autocastgen::forget_compiled_graphs"); }

void note_runtime_policy_installed(std::string_view description) {
  {
    const std::lock_guard<std::mutex> lock(g_policies_mutex);
    g_runtime_policies = fnv1a(fnv1a(g_runtime_policies, description), "\n");
  }
  drop_compiled_graphs();
}

void note_runtime_policies_cleared() {
  {
    const std::lock_guard<std::mutex> lock(g_policies_mutex);
    g_runtime_policies = kFnvOffset;
  }
  drop_compiled_graphs();
}

uint64_t runtime_policies_digest() {
  const std::lock_guard<std::mutex> lock(g_policies_mutex);
  return g_runtime_policies;
}

void restore_runtime_policies_digest(uint64_t digest) {
  {
    const std::lock_guard<std::mutex> lock(g_policies_mutex);
    g_runtime_policies = digest;
  }
  drop_compiled_graphs();
}

std::string policies_digest() { return policies_key(); }

std::vector<std::string> generated_library_identities() {
  const std::lock_guard<std::mutex> lock(g_policies_mutex);
  return {g_generated_libraries.begin(), g_generated_libraries.end()};
}

void note_generated_library(std::string_view identity) {
  {
    const std::lock_guard<std::mutex> lock(g_policies_mutex);
    g_generated_libraries.emplace(identity);
  }
  drop_compiled_graphs();
}

namespace {

// Random per process: a process id repeats (the first process of every container has the same).
const std::string& process_nonce() {
  static const std::string nonce = [] {
    std::random_device device;
    char text[24];
    std::snprintf(text, sizeof text, "%08x%08x", device(), device());
    return std::string(text);
  }();
  return nonce;
}

// Note [trace key]: what a traced graph may depend on, as one string Python compares cheaply:
// every device type whose autocastgen state is not the default (enabled, dtype, nesting, cache
// flag), the drivers' switch word (switches.h), and the policies in force (Note [policies in the
// trace key]).
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
  const uint32_t active = stats::detail::active();
  key += "active=" + std::to_string(active);  // the watch's mode is read when the graph runs
  // A graph traced with insight on names this process's records by index (Note [insight in
  // compiled code] in insight/traced_calls.cpp): PyTorch's compile caches must not give it to
  // another process, whose records differ (its AOTAutograd cache skips the trace that would make
  // them).
  if (active != 0) key += ";process=" + process_nonce();
  // Module rules and the module the frame starts in (Note [module frames] in modules.h).
  const std::string* module = modules::current_path();
  key += ";modules=" + std::to_string(modules::rules_generation()) + ":" + (module != nullptr ? "in:" + *module : "-");
  key += ";policies=" + policies_key();
  return key;
}

}  // namespace
}  // namespace autocastgen::detail

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("autocast_trace_key() -> str", bookkeeping([] { return autocastgen::detail::trace_key(); }));
}
