// Shared by the runtime's torch sources; not installed.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/operator_name.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "autocastgen/runtime/state.h"

namespace autocastgen::detail {

// The autocast dispatch key of `device`; throws c10::Error for a device type that has none.
c10::DispatchKey autocast_key(c10::DeviceType device);

// This thread's state of `device` in one thread-local lookup (the cast cache's hit path).
const DeviceAutocastState& thread_device_state(c10::DeviceType device);

// What cached_cast did, for the statistics' counted cast (own_cast_counted in
// insight/stats.cpp): nothing, a conversion of a tensor the cache does not take, a hit, or a miss
// (converted and stored); `evicted` grows by the entries dropped meanwhile (cast_cache.cpp).
enum class CastOutcome { none, cast, hit, miss };
at::Tensor cached_cast_with_outcome(c10::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                    CastOutcome& outcome, uint64_t& evicted);

// Note [caches of a scope]: what lives as long as a device's outermost AutocastScope. The state's
// own is this thread's cast cache; a room above the state that keeps something per scope (fp8's
// weight copies, Note [fp8 weight cache]) registers a function dropping its part for `device` on
// the calling thread, once, while the library loads (a static initialiser), and the state calls
// it when the device's outermost scope ends (state.cpp). So the state calls no room above it
// (Note [runtime layers] in runtime/CMakeLists.txt). A few slots of atomic pointers: no lock.
using ScopeCacheDrop = void (*)(c10::DeviceType device);
void on_scope_end(ScopeCacheDrop drop);

// Whether `tensor` is a traced one (torch.compile, make_fx): without data of its own (meta, a
// Python subclass such as FakeTensor, a functional wrapper). A real tensor seen by a
// TorchDispatchMode (a counting mode in eager code) is not (traced.cpp).
bool is_traced(const at::Tensor& tensor);

// Called by every driver call (wrapper_trace): while tracing, tells the Python package that the
// graph being traced depends on the autocast state and on the insight switches (traced.cpp).
// Returns whether the call must leave its op untouched (Note [the backward a trace puts in the
// forward's scope]).
bool note_driver_call_if_traced();
// Whether the driver call running on this thread is being traced by torch.compile (told by the
// Python package at the call's start): the insight then records instead of counting (Note [insight
// in compiled code] in insight/traced_calls.cpp).
bool compiling_call();

// Note [policies in the trace key] (traced.cpp): what decides the wrappers' casts besides the
// state. A runtime policy's load or registration folds `description` (its resolved entries,
// sections and recipe) into the key; a clear drops every runtime policy's part; a generated
// library adds its `identity` (a digest of what it does) while it is loaded. Each also drops
// compiled graphs (below).
void note_runtime_policy_installed(std::string_view description);
void note_runtime_policies_cleared();
void note_generated_library(std::string_view identity);
// The runtime policies' part of the key, to put back what a pushed set of runtime policies had
// (Note [a policy for one export] in runtime_policy.cpp); setting it drops compiled graphs.
uint64_t runtime_policies_digest();
void restore_runtime_policies_digest(uint64_t digest);
// The policies in force as the trace key names them ("<runtime>:<generated>", hex digests), and
// the identities of the generated libraries loaded.
std::string policies_digest();
std::vector<std::string> generated_library_identities();

// Tells the Python package that what compiled graphs were traced with changed (a policy, or fp8's
// measured decisions): it drops Dynamo's compiled code. Nothing without the package (traced.cpp).
void drop_compiled_graphs();

}  // namespace autocastgen::detail

namespace autocastgen::detail {

// `ns::name[.overload]`, as runtime policies and key claims name an op.
std::string qualified_name(const c10::OperatorName& name);

// Whether `qualified` (`ns::name[.overload]`) has a runtime policy on `key` (runtime_policy.cpp).
bool has_runtime_policy(const std::string& qualified, c10::DispatchKey key);

}  // namespace autocastgen::detail
