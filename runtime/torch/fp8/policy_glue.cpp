// The fp8 policy's GEMMs (policy_call.h's fp8 driver): the support rule decides, fp8.h computes.
#include <optional>

#include <ATen/core/Tensor.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/torch/policy_call.h"

namespace autocastgen::torch {

namespace {

fp8::CallOptions options_of(const Fp8Call& call) {
  fp8::CallOptions options;
  options.cache_weights = call.cache_weights;
  return options;
}

}  // namespace

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias) {
  return fp8::try_fp8_linear(input, weight, bias, call.recipe, call.out_dtype, options_of(call));
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat2) {
  return fp8::try_fp8_mm(self, mat2, call.recipe, call.out_dtype, options_of(call));
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat1,
                                   const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  return fp8::try_fp8_addmm(self, mat1, mat2, beta, alpha, call.recipe, call.out_dtype, options_of(call));
}

}  // namespace autocastgen::torch
