// What stats.cpp and watch.cpp share beyond the public headers. Not installed.
#pragma once

#include <string>

#include <c10/core/ScalarType.h>

#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/watch.h"

namespace autocastgen::stats::detail {

// PyTorch-style dtype name (torch.bfloat16 -> "bfloat16"); "none" for Undefined.
std::string dtype_name(c10::ScalarType dtype);

// Forgets the first non-finite event and which ops have warned (reset()).
void reset_watch_events();

// Note [events in the file] in stats_table.h: whether the row (op, policy, module) has no non-finite
// event yet in the process's table or in an open block's, and keeping one there.
bool wants_event(const char* op, Policy policy, uint32_t module);
void record_event(const char* op, Policy policy, uint32_t module, const std::string& message, const std::string& line);

// Note [insight in compiled code] in traced_calls.cpp (whether a call is being traced:
// compiling_call in state/state_internal.h). The counters of a call being traced: a record the
// graph's stats_traced_call op adds to the table each time the compiled graph runs. Null when the
// record cannot be emitted (no Python package).
OpCounters* traced_counters(const char* op, Policy policy, uint32_t module);
// A compiled call's counts (calls, casts, cast bytes, ran_in, input dtypes), added to this thread's
// entry for (op, policy, module) and to its compiled_calls.
void count_compiled_call(const char* op, Policy policy, uint32_t module, const OpCounters& traced);
// thread_counters for the module with path id `module` (a compiled call's, recorded when traced).
OpCounters* thread_counters_in(const char* op, Policy policy, uint32_t module);
// Instead of observing fake tensors: puts the op observe_traced into the graph being traced.
void observe_traced_call(const char* op, Policy policy, at::ScalarType ran_in, const Tensors& inputs,
                         const Tensors& outputs);
// The user's line of a compiled call's event, recorded when it was traced (empty: find it as eager).
void set_traced_line(const std::string* line);
// The module path id of a compiled call's event (-1: the running module, as eager).
void set_traced_module(int64_t module);

}  // namespace autocastgen::stats::detail
