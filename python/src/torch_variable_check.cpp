// Compiled, never linked: torch_variable.h's account of THPVariable against the release's own
// header (Note [one _C for every CPython]). This file alone uses torch's Python headers, with the
// full C API of the builder's interpreter; a layout both APIs share (the object header is part of
// the stable ABI).
#include <torch/csrc/autograd/python_variable.h>

#include <cstddef>
#include <type_traits>

#include "torch_variable.h"

using autocastgen::python::TorchVariableHead;

static_assert(std::is_same_v<decltype(THPVariable::cdata), autocastgen::python::TensorSlot>,
              "this torch's THPVariable holds its tensor in another type than torch_variable.h says: "
              "update TensorSlot there");
static_assert(offsetof(THPVariable, cdata) == offsetof(TorchVariableHead, cdata),
              "this torch's THPVariable no longer keeps its tensor right after the object header: "
              "update TorchVariableHead in torch_variable.h");
// The same objects: both declarations name torch's exported variables (a conflicting declaration
// would not compile).
static_assert(std::is_same_v<decltype(THPVariableClass), PyObject*>);
static_assert(std::is_same_v<decltype(ParameterClass), PyObject*>);
