// The backend's ops: schemas and plain CPU kernels (no autocast logic: that is generated).
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

at::Tensor fused_linear(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  at::Tensor out = at::matmul(input, weight.t());
  return bias ? out + *bias : out;
}

at::Tensor scale(const at::Tensor& self, double factor) { return self * factor; }

at::Tensor& scale_(at::Tensor& self, double factor) { return self.mul_(factor); }

}  // namespace

TORCH_LIBRARY(mybackend, m) {
  m.def("fused_linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor");
  m.def("scale(Tensor self, float factor) -> Tensor");
  m.def("scale_(Tensor(a!) self, float factor) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(mybackend, CPU, m) {
  m.impl("fused_linear", TORCH_FN(fused_linear));
  m.impl("scale", TORCH_FN(scale));
  m.impl("scale_", TORCH_FN(scale_));
}
