// The fp8 policy's GEMMs (policy_call.h's fp8 driver): the support rule decides, fp8.h computes.
#include <initializer_list>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/Exception.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/torch/policy_call.h"

namespace autocastgen::torch {

namespace {

fp8::CallOptions options_of(const Fp8Call& call) {
  fp8::CallOptions options;
  options.cache_weights = call.cache_weights;
  return options;
}

// Note [fp8 and tensor subclasses]
// A tensor subclass met eagerly (a DTensor from tensor parallel, no dispatch mode active) runs the
// GEMM in fp8 per shard where its layout allows (Note [fp8 under tensor parallel] in gemm.cpp; the
// support rule asks the subclass). Where it does not, the call runs as lower_precision_fp: the
// subclass handles the lower-precision GEMM itself (DTensor: its sharding rules), the statistics
// count it under the lower-precision dtype in ran_in, and the first such call in the process says
// why. Under tracing (a dispatch mode active) subclasses stay on the traced path of Note [fp8 under
// tracing]. FSDP2 is unaffected: its forward sees plain, all-gathered weights.
std::optional<at::Tensor> said_once(std::optional<at::Tensor> out, const fp8::Support& refused,
                                    std::initializer_list<const at::Tensor*> operands, const char* op) {
  if (out.has_value()) return out;
  for (const at::Tensor* t : operands) {
    if (t->defined() && t->key_set().has(c10::DispatchKey::Python) &&
        c10::impl::TorchDispatchModeTLS::stack_len() == 0) {
      TORCH_WARN_ONCE("autocastgen: an fp8 GEMM on DTensors or other tensor subclasses runs in the lower-precision "
                      "dtype (first: ", op, ": ", refused.reason, "); such calls are counted under ran_in in the "
                      "statistics (docs/distributed.md)");
      break;
    }
  }
  return out;
}

}  // namespace

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias) {
  const at::Tensor no_bias;
  fp8::Support refused;
  return said_once(fp8::try_fp8_linear(input, weight, bias, call.recipe, call.out_dtype, options_of(call), &refused),
                   refused, {&input, &weight, bias ? &*bias : &no_bias}, call.site.op);
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat2) {
  fp8::Support refused;
  return said_once(fp8::try_fp8_mm(self, mat2, call.recipe, call.out_dtype, options_of(call), &refused), refused,
                   {&self, &mat2}, call.site.op);
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat1,
                                   const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  fp8::Support refused;
  return said_once(fp8::try_fp8_addmm(self, mat1, mat2, beta, alpha, call.recipe, call.out_dtype, options_of(call),
                                      &refused),
                   refused, {&self, &mat1, &mat2}, call.site.op);
}

}  // namespace autocastgen::torch
