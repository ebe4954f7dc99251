// Convolutions: PyTorch routes every convolution of a device it has no backend code for to
// convolution_overrideable and its backward, which such a backend must implement. Here both run
// the CPU convolution on host copies.
#include "mydevice.h"

#include <array>
#include <tuple>

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/library.h>

namespace mydevice {
namespace {

std::optional<at::Tensor> to_cpu(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? std::optional<at::Tensor>(mydevice::to_cpu(*t)) : t;
}

at::Tensor to_device_or_undefined(const at::Tensor& t) { return t.defined() ? to_device(t) : t; }

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  return to_device(at::convolution(mydevice::to_cpu(input), mydevice::to_cpu(weight), to_cpu(bias), stride, padding,
                                   dilation, transposed, output_padding, groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  // The bias has one entry per output channel.
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::array<int64_t, 1> bias_sizes{channels};
  auto [grad_input, grad_weight, grad_bias] =
      at::convolution_backward(mydevice::to_cpu(grad_output), mydevice::to_cpu(input), mydevice::to_cpu(weight),
                               bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask);
  return {to_device_or_undefined(grad_input), to_device_or_undefined(grad_weight), to_device_or_undefined(grad_bias)};
}

}  // namespace
}  // namespace mydevice

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(mydevice::convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(mydevice::convolution_backward));
}
