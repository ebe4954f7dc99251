// How autocastgen's ops that take no tensor register their kernels (internal): Note [bookkeeping ops].
#pragma once

#include <utility>

#include <c10/core/DispatchKey.h>
#include <torch/library.h>

namespace autocastgen::detail {

// Note [bookkeeping ops]
// The ops that read or change autocastgen's state, policies, places and statistics take no tensor
// and compute nothing a graph should hold. A kernel given to `m.def` directly is registered as
// CompositeImplicitAutograd, and torch.export's run_decompositions (with any table that keeps an
// op, `{}` included) replaces the kernel of every functional CompositeImplicitAutograd op, of every
// namespace, by a Python one that returns NotImplemented ("keep this op in the graph"). Our
// drivers and the package call these ops while such a trace runs (under PyTorch's Python
// dispatcher), so that NotImplemented reached C++: "Unable to cast Python instance of type
// NotImplementedType". Registered at CompositeExplicitAutograd, an op of no tensor runs the same
// kernel under every dispatch key (its dispatch key set is empty) and is nothing export keeps.
template <typename Fn>
::torch::CppFunction bookkeeping(Fn&& fn) {
  return ::torch::dispatch(c10::DispatchKey::CompositeExplicitAutograd, std::forward<Fn>(fn));
}

}  // namespace autocastgen::detail
