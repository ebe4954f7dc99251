// What autocastgen._C reads of torch's Python tensor object, without torch's Python headers.
//
// Note [one _C for every CPython]
// autocastgen._C is built against the stable ABI (Py_LIMITED_API of CPython 3.10, the floor of
// requires-python; the file is _C.abi3.so), so one build per torch release loads under every CPython
// that release supports. torch's own Python headers (torch/csrc/autograd/python_variable.h,
// pybind11) need the full C API of one interpreter, so this header says the two things _C needs of
// them itself:
//  - the layout of THPVariable's start: the object's header, then the tensor (a c10::MaybeOwned
//    until 2.9, the tensor itself from 2.10);
//  - THPVariableClass and ParameterClass, the two exact types of a plain tensor, which libtorch_python
//    exports.
// torch_variable_check.cpp compares both with the release's real header at build time (a
// static_assert), so a release that changes them fails to build rather than reading the wrong bytes.
// A free-threaded CPython (3.13t, 3.14t) does not load abi3 modules: there the GradScaler calls
// torch.ops, the same op.
#pragma once

#include <Python.h>  // before anything else: Py_LIMITED_API, where wanted, is defined before this
#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <torch/version.h>

extern PyObject* THPVariableClass;
extern PyObject* ParameterClass;

namespace autocastgen::python {

#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 10
using TensorSlot = c10::MaybeOwned<at::Tensor>;
inline const at::Tensor& tensor_in(const TensorSlot& slot) { return *slot; }
#else
using TensorSlot = at::Tensor;
inline const at::Tensor& tensor_in(const TensorSlot& slot) { return slot; }
#endif

// The start of torch's THPVariable; nothing after the tensor is read.
struct TorchVariableHead {
  PyObject_HEAD
  TensorSlot cdata;
};

// A torch.Tensor or an nn.Parameter itself (PyTorch treats the two alike), no other subclass.
inline bool is_plain_tensor(PyObject* object) {
  PyTypeObject* type = Py_TYPE(object);
  return type == reinterpret_cast<PyTypeObject*>(THPVariableClass) ||
         type == reinterpret_cast<PyTypeObject*>(ParameterClass);
}

// The tensor of a plain tensor (is_plain_tensor); nothing is checked.
inline const at::Tensor& unpack(PyObject* plain_tensor) {
  return tensor_in(reinterpret_cast<const TorchVariableHead*>(plain_tensor)->cdata);
}

}  // namespace autocastgen::python
