// Calling an op the autocastgen Python package defines (internal): the state's trace notes and the
// insight's records of compiled calls both ask Python this way.
#pragma once

#include <optional>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/DispatchKeySet.h>

namespace autocastgen::detail {

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

}  // namespace autocastgen::detail
