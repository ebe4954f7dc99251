// The fp8 policy's GEMMs (policy_call.h's fp8 driver): the support rule decides, fp8.h computes.
// The drivers' side of fp8, over the fp8 room's public API (autocastgen/fp8/): fp8 knows nothing of
// the drivers (Note [runtime layers] in runtime/CMakeLists.txt).
#include <initializer_list>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/Exception.h>

#include <c10/core/GradMode.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/fp8/select.h"
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

bool needs_grad(std::initializer_list<const at::Tensor*> operands) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : operands)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// The recipe's selection (Note [fp8 selection] in select.cpp) for a GEMM the support rule took:
// true when it runs in fp8; otherwise the reason is left in the call.
bool selected(const Fp8Call& call, const at::Tensor& operand, std::int64_t m, std::int64_t k, std::int64_t n,
              bool backward) {
  const fp8::Support s = fp8::select_gemm(call.recipe, operand.device(), call.out_dtype, {m, k, n, backward});
  if (!s && call.skipped != nullptr) *call.skipped = s.reason;
  return s.ok;
}

std::optional<at::Tensor> refused_with(const Fp8Call& call, const fp8::Support& refused) {
  if (call.skipped != nullptr) *call.skipped = refused.reason;
  return std::nullopt;
}

}  // namespace

// With `select: all` the support rule alone decides (try_fp8_*: one check); otherwise the support
// rule first (a selection measures only GEMMs fp8 can run), then the selection.
std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias) {
  const at::Tensor no_bias;
  fp8::Support refused;
  if (call.recipe.select != fp8::Select::All) {
    refused = fp8::fp8_linear_support(input, weight, bias, call.out_dtype, call.recipe.scaling);
    if (!refused) return said_once(refused_with(call, refused), refused, {&input, &weight, bias ? &*bias : &no_bias}, call.site.op);
    const std::int64_t k = weight.size(1);
    if (!selected(call, input, input.numel() / k, k, weight.size(0),
                  needs_grad({&input, &weight, bias ? &*bias : &no_bias})))
      return std::nullopt;
    return fp8::fp8_linear(input, weight, bias, call.recipe, call.out_dtype, options_of(call));
  }
  std::optional<at::Tensor> out =
      fp8::try_fp8_linear(input, weight, bias, call.recipe, call.out_dtype, options_of(call), &refused);
  if (!out) (void)refused_with(call, refused);
  return said_once(std::move(out), refused, {&input, &weight, bias ? &*bias : &no_bias}, call.site.op);
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat2) {
  fp8::Support refused;
  if (call.recipe.select != fp8::Select::All) {
    refused = fp8::fp8_mm_support(self, mat2, call.out_dtype, call.recipe.scaling);
    if (!refused) return said_once(refused_with(call, refused), refused, {&self, &mat2}, call.site.op);
    if (!selected(call, self, self.size(0), self.size(1), mat2.size(1), needs_grad({&self, &mat2})))
      return std::nullopt;
    return fp8::fp8_mm(self, mat2, call.recipe, call.out_dtype, options_of(call));
  }
  std::optional<at::Tensor> out = fp8::try_fp8_mm(self, mat2, call.recipe, call.out_dtype, options_of(call), &refused);
  if (!out) (void)refused_with(call, refused);
  return said_once(std::move(out), refused, {&self, &mat2}, call.site.op);
}

std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat1,
                                   const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha) {
  fp8::Support refused;
  if (call.recipe.select != fp8::Select::All) {
    refused = fp8::fp8_addmm_support(self, mat1, mat2, call.out_dtype, call.recipe.scaling);
    if (!refused) return said_once(refused_with(call, refused), refused, {&self, &mat1, &mat2}, call.site.op);
    if (!selected(call, mat1, mat1.size(0), mat1.size(1), mat2.size(1), needs_grad({&self, &mat1, &mat2})))
      return std::nullopt;
    return fp8::fp8_addmm(self, mat1, mat2, beta, alpha, call.recipe, call.out_dtype, options_of(call));
  }
  std::optional<at::Tensor> out =
      fp8::try_fp8_addmm(self, mat1, mat2, beta, alpha, call.recipe, call.out_dtype, options_of(call), &refused);
  if (!out) (void)refused_with(call, refused);
  return said_once(std::move(out), refused, {&self, &mat1, &mat2}, call.site.op);
}

}  // namespace autocastgen::torch
