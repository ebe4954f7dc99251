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
// A tensor subclass met eagerly (a DTensor from tensor parallel, no dispatch mode active) holds no
// data of its own for the fp8 kernels, and its operands' tensorwise scales would have to come from
// an amax reduced across the mesh, which this path does not do yet. Such a call runs as
// lower_precision_fp instead: the subclass handles the lower-precision GEMM itself (DTensor: its
// sharding rules), the statistics count it under the lower-precision dtype in ran_in, and the
// first one warns. Under tracing (a dispatch mode active) subclasses stay on the traced path of
// Note [fp8 under tracing]. FSDP2 is unaffected: its forward sees plain, all-gathered weights.
bool eager_subclass(std::initializer_list<const at::Tensor*> operands, const char* op) {
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) return false;
  for (const at::Tensor* t : operands) {
    if (t->defined() && t->key_set().has(c10::DispatchKey::Python)) {
      TORCH_WARN_ONCE("autocastgen: fp8 GEMMs do not take DTensors or other tensor subclasses yet (first: ", op,
                      "); such calls run in the lower-precision dtype instead, counted under ran_in in the "
                      "statistics (docs/distributed.md)");
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias) {
  const at::Tensor no_bias;
  if (eager_subclass({&input, &weight, bias ? &*bias : &no_bias}, call.site.op)) return std::nullopt;
  return fp8::try_fp8_linear(input, weight, bias, call.recipe, call.out_dtype, options_of(call));
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat2) {
  if (eager_subclass({&self, &mat2}, call.site.op)) return std::nullopt;
  return fp8::try_fp8_mm(self, mat2, call.recipe, call.out_dtype, options_of(call));
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat1,
                                   const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (eager_subclass({&self, &mat1, &mat2}, call.site.op)) return std::nullopt;
  return fp8::try_fp8_addmm(self, mat1, mat2, beta, alpha, call.recipe, call.out_dtype, options_of(call));
}

}  // namespace autocastgen::torch
