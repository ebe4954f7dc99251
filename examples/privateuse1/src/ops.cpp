// The backend's own ops (namespace mydevice): a fused op with a policy of its own in
// mydevice_policy.yaml, and the memory counter the Python module reads.
#include "mydevice.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace mydevice {
namespace {

// Written as a composite of aten ops, so it runs on any device and autograd differentiates it; a
// real backend would register a fused kernel for PrivateUse1 and an autograd formula.
at::Tensor fused_linear_relu(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return at::relu(at::linear(input, weight, bias));
}

}  // namespace
}  // namespace mydevice

TORCH_LIBRARY(mydevice, m) {
  m.def("fused_linear_relu(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def("memory_allocated() -> int", [] { return mydevice::memory_allocated(); });
}

TORCH_LIBRARY_IMPL(mydevice, CompositeImplicitAutograd, m) {
  m.impl("fused_linear_relu", TORCH_FN(mydevice::fused_linear_relu));
}
