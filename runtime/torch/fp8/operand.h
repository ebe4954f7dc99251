// GEMM operands to fp8 (internal): which are weights, which scaling each gets.
#pragma once

#include <ATen/core/Tensor.h>

#include "autocastgen/fp8/fp8.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {

// An operand of a forward GEMM in recipe.forward_dtype, in the operand's own (logical) layout:
// a weight (Note [fp8 weights]) or a transposed view of one through this thread's weight cache
// and, under delayed scaling, the weight's delayed state; anything else current-scaled.
[[nodiscard]] Quantized quantize_forward_operand(const at::Tensor& t, const Recipe& recipe, const CallOptions& options);

// The gradient of a GEMM's output in recipe.backward_dtype, current-scaled.
[[nodiscard]] Quantized quantize_gradient(const at::Tensor& g, const Recipe& recipe, const CallOptions& options);

}  // namespace autocastgen::fp8::detail
