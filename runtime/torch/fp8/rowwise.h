// Row-wise fp8 GEMMs (internal; Note [fp8 rowwise] in rowwise.cpp): the autograd function gemm.cpp runs for the
// rowwise and rowwise_with_gw_hp granularities.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "autocastgen/fp8/fp8.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {

struct RowwiseSpec {
  bool linear = false;  // a is [*, K], b a [N, K] weight (the GEMM's right operand is b^T)
  double alpha = 1.0;
  double beta = 1.0;
  Recipe recipe;  // granularity rowwise or rowwise_with_gw_hp
  c10::ScalarType out_dtype = c10::ScalarType::BFloat16;
  CallOptions options;
  bool grad_a = false;  // whether the backward will need each gradient: what the forward keeps
  bool grad_b = false;
};

// out = beta * add + alpha * (A x B) as gemm.cpp's Fp8Gemm computes it, with row-wise scales.
[[nodiscard]] at::Tensor rowwise_gemm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& add,
                                      const RowwiseSpec& spec);

// x (2-D) in fp8 with one power-of-two scale per slice: the amax is taken over `reduced_dim`, so
// the inverse scales have x's shape with that dimension 1 ([R, 1] for reduced_dim 1, [1, C] for 0).
// The fused kernel where `fused`, x is a real tensor and the device has one; PyTorch ops otherwise
// (Note [fp8 rowwise], "Quantisation": the same bits).
[[nodiscard]] Quantized quantize_rows(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8,
                                      std::int64_t margin, bool fused);
// The same with PyTorch ops only: what traced code records.
[[nodiscard]] Quantized quantize_rows_with_ops(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8,
                                               std::int64_t margin);

// The same for a weight through this thread's weight cache (keyed by reduced_dim too).
[[nodiscard]] Quantized quantize_weight_rows(const at::Tensor& w, std::int64_t reduced_dim, c10::ScalarType fp8,
                                             std::int64_t margin, bool cache, bool fused);

}  // namespace autocastgen::fp8::detail
