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
// tensors (torch.Tensor or nn.Parameter, which PyTorch treats alike) takes this path; for anything else unscale_ returns False and the caller
// (autocastgen/grad_scaler.py) goes through torch.ops, as it does under torch.compile.
// The module does not link the runtime: it finds the op registered by the runtime already loaded,
// so one process never holds two copies of it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

namespace {

bool unscale(pybind11::handle grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  PyObject* list = grads.ptr();
  if (!PyList_CheckExact(list)) return false;
  const Py_ssize_t n = PyList_GET_SIZE(list);
  std::vector<at::Tensor> tensors;
  tensors.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (!THPVariable_CheckExact(item)) return false;
    tensors.push_back(THPVariable_Unpack(item));
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("autocastgen::non_finite_check_and_unscale_", "")
                             .typed<void(at::TensorList, at::Tensor&, const at::Tensor&)>();
  {
    pybind11::gil_scoped_release no_gil;
    op.call(tensors, found_inf, inv_scale);
  }
  return true;  // `tensors` is released here, with the GIL held
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "autocastgen's compiled Python entries (Note [unscale from Python])";
  m.def("non_finite_check_and_unscale_", &unscale, pybind11::arg("grads"), pybind11::arg("found_inf"),
        pybind11::arg("inv_scale"),
        "Runs torch.ops.autocastgen.non_finite_check_and_unscale_ on a list of plain tensors and "
        "returns True; returns False, doing nothing, when `grads` is not a list of plain tensors.");
}
