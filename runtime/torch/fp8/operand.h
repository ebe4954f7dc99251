// GEMM operands to fp8 (internal): which are weights, which scaling each gets, eager or traced.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "autocastgen/fp8/fp8.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {

// An operand of a forward GEMM in recipe.forward_dtype, in the operand's own (logical) layout:
// a weight (Note [fp8 weights]) or a transposed view of one through this thread's weight cache
// and, under delayed scaling, the weight's delayed state; anything else current-scaled.
[[nodiscard]] Quantized quantize_forward_operand(const at::Tensor& t, const Recipe& recipe, const CallOptions& options);

// The gradient of a GEMM's output in recipe.backward_dtype, current-scaled.
[[nodiscard]] Quantized quantize_gradient(const at::Tensor& g, const Recipe& recipe, const CallOptions& options);

// Whether `t` is a weight (Note [fp8 weights]): cached, and delayed-scaled under delayed scaling.
[[nodiscard]] bool is_weight(const at::Tensor& t);
// W when `t` is W.t() for a 2-D weight W (so that `x @ W.t()` shares W's fp8 copies).
[[nodiscard]] std::optional<at::Tensor> transposed_weight(const at::Tensor& t);

// Note [fp8 in an exported program] (operand.cpp): whether this thread traces a program for
// autocastgen.export (weights then quantised by PyTorch's ops, current scaling only); set returns
// the previous value.
[[nodiscard]] bool exporting_program();
bool set_exporting_program(bool on);

// Whether `t` has no data (a meta tensor, or a Python tensor such as FakeTensor).
[[nodiscard]] bool dataless(const at::Tensor& t);
// Whether `t` is being traced rather than computed on (Note [fp8 under tracing]).
[[nodiscard]] bool traced(const at::Tensor& t);
// Whether `t` is a tensor subclass met outside any dispatch mode: a DTensor in an eager step
// (Note [fp8 under tensor parallel] in gemm.cpp). Its operands go through the dispatcher ops, whose
// subclass rules (autocastgen.distributed for DTensor) quantise the local shards.
[[nodiscard]] bool eager_subclass(const at::Tensor& t);

// The gradient of addmm's `self` (beta * self + ...) from the output's gradient g2 [M, N], in
// `dtype` with `sizes` (self's); a bias (beta 1, N elements) is summed in float32 as it is read,
// without a float32 copy of the gradient.
[[nodiscard]] at::Tensor addend_gradient(const at::Tensor& g2, double beta, const std::vector<std::int64_t>& sizes,
                                         c10::ScalarType dtype);

// The Autograd kernel of the ops without a gradient (Note [non-differentiable ops]).
void below_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack);

// The weight's fp8 copy through this thread's cache and its delayed state, computed now: the
// eager path and the kernel of torch.ops.autocastgen.fp8_quantize_weight.
[[nodiscard]] Quantized quantize_weight(const at::Tensor& w, const Recipe& recipe, const CallOptions& options);

}  // namespace autocastgen::fp8::detail
