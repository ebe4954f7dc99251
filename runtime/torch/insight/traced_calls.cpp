// The statistics and the watch in graphs torch.compile traces (Note [insight in compiled code]):
// a traced driver call's record, and the two ops a compiled graph runs to replay it.
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/watch.h"
#include "python_op.h"
#include "watch_internal.h"

namespace autocastgen::stats::detail {

// Note [insight in compiled code]
// A compiled graph runs no driver: the casts a trace recorded run as ops of the graph. So while
// statistics, the watch or the range record are on, a driver call being traced by torch.compile
// (Note [reads while tracing] in state/traced.cpp) counts into a record of its own instead of the
// table, and puts ops into the graph that replay it: stats_traced_call(id) adds the record's calls,
// casts, cast bytes, ran_in and input dtypes to the table each time the graph runs (the trace is
// complete by then), and observe_traced(inputs, outputs, id) checks the real tensors as the watch
// and the range record do eagerly, naming the line the trace recorded. From PyTorch 2.11 both are
// marked side-effectful only (kept, not ordered; 2.4 and 2.7 order them as effects): Inductor 2.15
// frees a buffer that an effectful op reads before the kernels that still read it, and
// stats_traced_call moves to the graph's start in Inductor (Note [statistics first in Inductor's
// graphs] in python/autocastgen/_core/traced.py). Their calls count as compiled_calls: the cast cache's
// fields are not known for them (Note [compiled calls] in insight/stats_json.cpp). With everything
// off nothing is emitted, and the guard of Note [reads while tracing] includes the switch word, so
// turning any of them on traces again at the next call. Records live for the process (one per
// traced driver call); a graph that names them is keyed to the process (Note [trace key] in
// state/traced.cpp). Whether a call is traced is the state's to know (compiling_call in
// state_internal.h); the records, the ops and what they count are the insight's.
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

void observe_traced_call(const char* op, Policy policy, at::ScalarType ran_in, const Tensors& inputs,
                         const Tensors& outputs) {
  (void)ran_in;  // the record's counters hold it (finish_counting)
  const auto emit = c10::Dispatcher::singleton().findSchema({"autocastgen::observe_traced", ""});
  if (!emit.has_value() || t_current < 0) return;
  TracedCall& traced = record(t_current);
  TORCH_INTERNAL_ASSERT(traced.op == op && traced.policy == policy);
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
  observe_inputs(*counters, active, in);
  set_traced_line(traced.line.empty() ? nullptr : &traced.line);
  set_traced_module(traced.module);
  try {
    observe_outputs(traced.op.c_str(), traced.policy, ran_in_of(traced.counters), *counters, active, in, out);
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
  // Note [insight in compiled code]; effectful and given fake kernels by the Python package.
  m.def("stats_traced_call(int id) -> ()");
  m.def("observe_traced(Tensor[] inputs, Tensor[] outputs, int id) -> ()");
}

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  m.impl("stats_traced_call", autocastgen::stats::detail::run_stats_traced_call);
  m.impl("observe_traced", autocastgen::stats::detail::run_observe_traced);
}
