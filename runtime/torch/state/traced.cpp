// What the runtime does while torch.compile traces (docs/compile.md): it tells the Python package
// which reads a graph depends on, and gives it the key its guards compare.
#include <cstdint>
#include <cstdio>
#include <deque>
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

#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/watch.h"
#include "autocastgen/torch/policy_call.h"
#include "state_internal.h"
#include "autocastgen/runtime/modules.h"
#include "insight/watch_internal.h"
#include "bookkeeping_op.h"

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
  return tensor.is_meta() ||
         tensor.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

namespace {
thread_local bool t_compiling = false;  // the current driver call is traced by torch.compile

// Calls a Python-defined op of no arguments at its CPU kernel, past the dispatch modes; nullopt
// when the package has not defined it.
template <typename Result>
std::optional<Result> call_python(const char* name) {
  const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!op.has_value() || !(op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
                           op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)))
    return std::nullopt;
  return op->typed<Result()>().redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU));
}
}  // namespace

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
// keys] in python/autocastgen/_traced.py). So the key names the policies by content, not by a
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
  // compiled code]): PyTorch's compile caches must not give it to another process, whose records
  // differ (its AOTAutograd cache skips the trace that would make them).
  if (active != 0) key += ";process=" + process_nonce();
  // Module rules and the module the frame starts in (Note [module frames] in modules.h).
  const std::string* module = modules::current_path();
  key += ";modules=" + std::to_string(modules::rules_generation()) + ":" + (module != nullptr ? "in:" + *module : "-");
  key += ";policies=" + policies_key();
  return key;
}

}  // namespace
}  // namespace autocastgen::detail

namespace autocastgen::stats::detail {

// Note [insight in compiled code]
// A compiled graph runs no driver: the casts a trace recorded run as ops of the graph. So while
// statistics, the watch or the range record are on, a driver call being traced by torch.compile
// (Note [reads while tracing]) counts into a record of its own instead of the table, and puts ops
// into the graph that replay it: stats_traced_call(id) adds the record's calls, casts, cast bytes,
// ran_in and input dtypes to the table each time the graph runs (the trace is complete by then),
// and observe_traced(inputs, outputs, id) checks the real tensors as the watch and the range
// record do eagerly, naming the line the trace recorded. From PyTorch 2.11 both are marked
// side-effectful only (kept, not ordered; 2.4 and 2.7 order them as effects): Inductor 2.15 frees a
// buffer that an effectful op reads before the kernels that still read it, and stats_traced_call
// moves to the graph's start in Inductor (Note [statistics first in Inductor's graphs] in
// python/autocastgen/_traced.py). Their calls count as compiled_calls: the cast cache's fields
// are not known for them (Note [compiled calls] in insight/stats_json.cpp). With everything off
// nothing is emitted, and the guard of Note [reads while tracing] includes the switch word, so
// turning any of them on traces again at the next call. Records live for the process (one per
// traced driver call); a graph that names them is keyed to the process (Note [trace key]).
struct TracedCall {
  std::string op;
  Policy policy;
  uint32_t module;  // the module path id the trace ran in
  OpCounters counters;
  std::string line;  // the user's line, for the watch's message
};

namespace {
std::mutex g_records_mutex;
std::deque<TracedCall> g_records;  // never shrinks: ids index it, elements never move
thread_local int64_t t_current = -1;

TracedCall& record(int64_t id) {
  const std::lock_guard<std::mutex> lock(g_records_mutex);
  TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < g_records.size(), "autocastgen: no traced call ", id,
              " in this process (a compiled graph from another process?)");
  return g_records[static_cast<size_t>(id)];
}
}  // namespace

// The flag is the current driver call's; the mode check keeps a compiled graph's own ops (which
// run after the trace, with no mode) from reading one left by the trace's last call.
bool compiling_call() {
  return ::autocastgen::detail::t_compiling && c10::impl::TorchDispatchModeTLS::stack_len() > 0;
}

OpCounters* traced_counters(const char* op, Policy policy, uint32_t module) {
  const auto emit = c10::Dispatcher::singleton().findSchema({"autocastgen::stats_traced_call", ""});
  if (!emit.has_value()) return nullptr;
  TracedCall* traced = nullptr;
  {
    const std::lock_guard<std::mutex> lock(g_records_mutex);
    t_current = static_cast<int64_t>(g_records.size());
    traced = &g_records.emplace_back(TracedCall{op, policy, module, OpCounters{}, {}});
  }
  emit->typed<void(int64_t)>().call(t_current);  // through the modes: into the graph
  return &traced->counters;
}

void observe_traced_call(const torch::Site& site, Policy policy, at::ScalarType ran_in, const Tensors& inputs,
                         const Tensors& outputs) {
  (void)ran_in;  // the record's counters hold it (finish_counting)
  const auto emit = c10::Dispatcher::singleton().findSchema({"autocastgen::observe_traced", ""});
  if (!emit.has_value() || t_current < 0) return;
  TracedCall& traced = record(t_current);
  TORCH_INTERNAL_ASSERT(traced.op == site.op && traced.policy == policy);
  traced.line = ::autocastgen::detail::call_python<std::string>("autocastgen::watch_user_line").value_or("");
  emit->typed<void(at::TensorList, at::TensorList, int64_t)>().call(inputs.tensors(), outputs.tensors(), t_current);
}

// The kernels of the two ops, run by compiled graphs.
void run_stats_traced_call(int64_t id) {
  const TracedCall& traced = record(id);
  count_compiled_call(traced.op.c_str(), traced.policy, traced.module, traced.counters);
}

// The ran_in of a traced call: the dtype its counters hold (one call, one dtype).
at::ScalarType ran_in_of(const OpCounters& counters) {
  for (size_t i = 0; i + 1 < kDtypeSlots; ++i)
    if (counters.ran_in[i] != 0) return static_cast<at::ScalarType>(i);
  return at::ScalarType::Undefined;
}

void run_observe_traced(at::TensorList inputs, at::TensorList outputs, int64_t id) {
  const uint32_t active = ::autocastgen::stats::detail::active();
  if (active == 0) return;  // switched off since the trace: its guard traces again at the next call
  const TracedCall& traced = record(id);
  Tensors in;
  Tensors out;
  in.add(inputs);
  out.add(outputs);
  OpCounters* counters = thread_counters_in(traced.op.c_str(), traced.policy, traced.module);
  // Site's device and key are not read by the observation; the op's name is.
  const autocastgen::torch::Site site{c10::DeviceType::CPU, c10::DispatchKey::AutocastCPU, traced.op.c_str()};
  observe_inputs(*counters, active, in);
  set_traced_line(traced.line.empty() ? nullptr : &traced.line);
  set_traced_module(traced.module);
  try {
    observe_outputs(site, traced.policy, ran_in_of(traced.counters), *counters, active, in, out);
  } catch (...) {
    set_traced_line(nullptr);
    set_traced_module(-1);
    throw;
  }
  set_traced_line(nullptr);
  set_traced_module(-1);
}

}  // namespace autocastgen::stats::detail

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("autocast_trace_key() -> str", bookkeeping([] { return autocastgen::detail::trace_key(); }));
  // Note [insight in compiled code]; effectful and given fake kernels by the Python package.
  m.def("stats_traced_call(int id) -> ()");
  m.def("observe_traced(Tensor[] inputs, Tensor[] outputs, int id) -> ()");
}

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  m.impl("stats_traced_call", autocastgen::stats::detail::run_stats_traced_call);
  m.impl("observe_traced", autocastgen::stats::detail::run_observe_traced);
}
