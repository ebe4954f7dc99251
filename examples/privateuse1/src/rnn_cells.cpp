// Fused LSTM and GRU cells: PyTorch's lstm_cell / gru_cell (and nn.LSTM, nn.GRU) take the fused path
// on PrivateUse1, whose kernels exist only for CUDA, so a backend provides them. Here they are
// computed on the host in float32 (as CUDA's kernels accumulate) and rounded once to the inputs'
// dtype. The workspace layout is this file's own: only its backward reads it.
#include "mydevice.h"

#include <tuple>

#include <ATen/ATen.h>
#include <torch/library.h>

namespace mydevice {
namespace {

// A device tensor as float32 on the host; an absent tensor stays absent.
at::Tensor host_float(const at::Tensor& t) { return t.defined() ? to_cpu(t).to(at::kFloat) : t; }
at::Tensor host_float(const std::optional<at::Tensor>& t) { return t ? host_float(*t) : at::Tensor(); }

// A host float32 result, back on the device in `dtype`.
at::Tensor device_as(const at::Tensor& t, at::ScalarType dtype) { return t.defined() ? to_device(t.to(dtype)) : t; }

at::Tensor sigmoid_grad(const at::Tensor& y) { return y * (1 - y); }
at::Tensor tanh_grad(const at::Tensor& y) { return 1 - y * y; }

// Gates in PyTorch's order: input, forget, cell, output. Workspace: the four activations.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor gates = host_float(input_gates) + host_float(hidden_gates);
  if (input_bias && input_bias->defined()) gates = gates + host_float(input_bias) + host_float(hidden_bias);
  const std::vector<at::Tensor> chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  const at::Tensor cy = f * host_float(cx) + i * g;
  const at::Tensor hy = o * cy.tanh();
  const at::ScalarType dtype = input_gates.scalar_type();
  return {device_as(hy, dtype), device_as(cy, dtype), device_as(at::cat({i, f, g, o}, 1), dtype)};
}

// Returns the gradients of the gates (input and hidden share them), of cx, and of the bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  const std::vector<at::Tensor> chunks = host_float(workspace).chunk(4, 1);
  const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  const at::Tensor tanh_cy = host_float(cy).tanh();
  at::Tensor ghy = host_float(grad_hy), gcy = host_float(grad_cy);
  if (!ghy.defined()) ghy = at::zeros_like(tanh_cy);
  if (!gcy.defined()) gcy = at::zeros_like(tanh_cy);
  gcy = gcy + ghy * o * tanh_grad(tanh_cy);
  const at::Tensor grad_gates = at::cat({gcy * g * sigmoid_grad(i), gcy * host_float(cx) * sigmoid_grad(f),
                                         gcy * i * tanh_grad(g), ghy * tanh_cy * sigmoid_grad(o)},
                                        1);
  const at::ScalarType dtype = workspace.scalar_type();
  return {device_as(grad_gates, dtype), device_as(gcy * f, dtype),
          has_bias ? device_as(grad_gates.sum(0), dtype) : at::Tensor()};
}

// Gates in PyTorch's order: reset, update, new. Workspace: r, z, n, hx and the hidden new gate.
std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor in_gates = host_float(input_gates), hid_gates = host_float(hidden_gates);
  if (input_bias && input_bias->defined()) {
    in_gates = in_gates + host_float(input_bias);
    hid_gates = hid_gates + host_float(hidden_bias);
  }
  const std::vector<at::Tensor> in = in_gates.chunk(3, 1), hid = hid_gates.chunk(3, 1);
  const at::Tensor r = (in[0] + hid[0]).sigmoid(), z = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  const at::Tensor h = host_float(hx);
  const at::Tensor hy = n + z * (h - n);
  const at::ScalarType dtype = input_gates.scalar_type();
  return {device_as(hy, dtype), device_as(at::cat({r, z, n, h, hid[2]}, 1), dtype)};
}

// Returns the gradients of the input gates, the hidden gates, hx, the input bias, the hidden bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor& grad_hy,
                                                                                          const at::Tensor& workspace,
                                                                                          bool has_bias) {
  const std::vector<at::Tensor> chunks = host_float(workspace).chunk(5, 1);
  const at::Tensor &r = chunks[0], &z = chunks[1], &n = chunks[2], &h = chunks[3], &hidden_new = chunks[4];
  const at::Tensor ghy = host_float(grad_hy);
  const at::Tensor gn = ghy * (1 - z) * tanh_grad(n);
  const at::Tensor gz = ghy * (h - n) * sigmoid_grad(z);
  const at::Tensor gr = gn * hidden_new * sigmoid_grad(r);
  const at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
  const at::Tensor grad_hidden = at::cat({gr, gz, gn * r}, 1);
  const at::ScalarType dtype = workspace.scalar_type();
  return {device_as(grad_input, dtype), device_as(grad_hidden, dtype), device_as(ghy * z, dtype),
          has_bias ? device_as(grad_input.sum(0), dtype) : at::Tensor(),
          has_bias ? device_as(grad_hidden.sum(0), dtype) : at::Tensor()};
}

}  // namespace
}  // namespace mydevice

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(mydevice::lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(mydevice::lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(mydevice::gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(mydevice::gru_cell_backward));
}
