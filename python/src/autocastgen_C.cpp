// autocastgen._C: the Python package's compiled part, one direct entry for the unscale op.
//
// Note [unscale from Python]
// Called through torch.ops, a list of N gradients is converted into the dispatcher's boxed stack
// and released again without the GIL, which costs about 90 ns per tensor: 94 us for 1000 empty
// CPU gradients against 5 us for the same call from C++ (2-core VM, torch 2.15), and on an H200 it
// made our op slower from Python than PyTorch's own (131 us against 73 us for 1000 empty CUDA
// gradients). Here the list is read once with the GIL held, the op runs through the dispatcher's
// typed call (so every device, and DTensor's handler, work as through torch.ops) with the GIL
// released, and the tensors are let go with the GIL held again. Only a Python list of plain
// tensors (torch.Tensor or nn.Parameter), with a plain found_inf and inv_scale, takes this path; for
// anything else unscale_ returns False and the caller (autocastgen/grad_scaler.py) goes through
// torch.ops, as it does under torch.compile. Errors are the op's own: a c10::Error becomes the
// RuntimeError torch.ops raises, with the same message.
// The module does not link the runtime: it finds the op registered by the runtime already loaded,
// so one process never holds two copies of it. It is written against the stable ABI (Note [one _C
// for every CPython] in torch_variable.h).
#ifndef Py_LIMITED_API  // python/CMakeLists.txt: the oldest CPython it is built for
#error "autocastgen._C is built against the stable ABI: define Py_LIMITED_API"
#endif
#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "torch_variable.h"

namespace {

using autocastgen::python::is_plain_tensor;
using autocastgen::python::unpack;

// Runs the op on the tensors, the GIL released; raises the op's error as torch.ops would.
bool call_without_gil(const std::vector<at::Tensor>& grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  std::optional<std::string> error;  // the op's message, where it failed
  PyThreadState* state = PyEval_SaveThread();
  try {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("autocastgen::non_finite_check_and_unscale_", "")
                               .typed<void(at::TensorList, at::Tensor&, const at::Tensor&)>();
    op.call(grads, found_inf, inv_scale);
  } catch (const c10::Error& failure) {
    error = failure.what_without_backtrace();
  } catch (const std::exception& failure) {
    error = failure.what();
  }
  PyEval_RestoreThread(state);
  if (!error) return true;
  PyErr_SetString(PyExc_RuntimeError, error->c_str());
  return false;
}

PyObject* non_finite_check_and_unscale(PyObject* /*module*/, PyObject* args) {
  PyObject* grads = nullptr;
  PyObject* found_inf = nullptr;
  PyObject* inv_scale = nullptr;
  if (!PyArg_ParseTuple(args, "OOO:non_finite_check_and_unscale_", &grads, &found_inf, &inv_scale)) {
    return nullptr;
  }
  if (!PyList_CheckExact(grads) || !is_plain_tensor(found_inf) || !is_plain_tensor(inv_scale)) {
    Py_RETURN_FALSE;
  }
  const Py_ssize_t n = PyList_Size(grads);
  std::vector<at::Tensor> tensors;
  tensors.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GetItem(grads, i);  // borrowed; the list is not changed meanwhile (GIL held)
    if (!is_plain_tensor(item)) Py_RETURN_FALSE;
    tensors.push_back(unpack(item));
  }
  at::Tensor found = unpack(found_inf);
  if (!call_without_gil(tensors, found, unpack(inv_scale))) return nullptr;
  Py_RETURN_TRUE;  // `tensors` is released after this, with the GIL held
}

PyMethodDef methods[] = {
    {"non_finite_check_and_unscale_", non_finite_check_and_unscale, METH_VARARGS,
     "non_finite_check_and_unscale_(grads, found_inf, inv_scale)\n--\n\n"
     "Runs torch.ops.autocastgen.non_finite_check_and_unscale_ on a list of plain tensors and returns "
     "True; returns False, doing nothing, when `grads` is not a list of plain tensors or found_inf or "
     "inv_scale is not a plain tensor."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "autocastgen's compiled Python entries (Note [unscale from Python])",
    -1,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C() { return PyModule_Create(&module); }
