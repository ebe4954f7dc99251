// The fp8 quantisation ops (torch.ops.autocastgen.fp8_quantize*, fp8_amax, fp8_scale_*): schema,
// device kernel, fake (Meta) kernel and autograd registration of each (Note [fp8 under tracing]).
#include <cstdint>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/kernels/fp8_element.h"
#include "operand.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;

// The checks both kernels make, so a trace fails where eager would.
void check_source(const at::Tensor& x, const char* who) {
  const c10::ScalarType t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, who, ": cannot quantise a ", t,
              " tensor (float32, bfloat16 or float16 only)");
}

void check_margin(std::int64_t margin, const char* who) {
  TORCH_CHECK(margin >= 0 && margin <= 64, who, ": margin must be in [0, 64], got ", margin);
}

void check_scale(const at::Tensor& scale, const at::Tensor& x) {
  TORCH_CHECK(scale.dim() == 0 && scale.scalar_type() == at::kFloat && scale.device() == x.device(),
              "fp8_scale_cast: scale must be a 0-dim float32 tensor on x's device");
}

void check_amax(const at::Tensor& amax) {
  TORCH_CHECK(amax.dim() == 0 && amax.scalar_type() == at::kFloat,
              "fp8_scale_from_amax: amax must be a 0-dim float32 tensor");
}

Recipe weight_recipe(c10::ScalarType dtype, c10::string_view scaling, std::int64_t history, std::int64_t margin) {
  const std::optional<Scaling> s = parse_scaling(std::string(scaling));
  TORCH_CHECK(s.has_value(), "fp8_quantize_weight: unknown scaling '", scaling, "' (current or delayed)");
  Recipe r;
  r.scaling = *s;
  r.forward_dtype = dtype;
  r.amax_history_len = history;
  r.margin = margin;
  r.validate();
  return r;
}

at::Tensor fp8_like(const at::Tensor& x, c10::ScalarType dtype) {
  (void)format_of(dtype);  // throws for a dtype other than the two fp8 formats
  return at::empty_symint(x.sym_sizes(), x.options().dtype(dtype));
}

// --- Device kernels (any device: primitives_for picks the fused kernels or the ATen ops) ---------

Pair quantize(const at::Tensor& x, c10::ScalarType dtype, std::int64_t margin, bool fused) {
  check_source(x, "fp8_quantize");
  check_margin(margin, "fp8_quantize");
  Quantized q = quantize_current(primitives_for(x.device().type(), fused), x.contiguous(), dtype,
                                 static_cast<std::int32_t>(margin));
  return {std::move(q.data), std::move(q.inv_scale)};
}

// Note [fp8 op outputs are fresh]
// With the cache, fp8_quantize_weight returns copies of the tensors it keeps: a compiled graph
// owns the outputs of the ops it calls, and Inductor may give an output's memory to a later buffer
// once the graph no longer needs it, which would overwrite the cached copy. The copy costs one byte
// per weight element per use in compiled code; eager code reads the cache directly.
Pair quantize_weight_op(const at::Tensor& weight, c10::ScalarType dtype, c10::string_view scaling,
                        std::int64_t history, std::int64_t margin, bool cache, bool fused) {
  check_source(weight, "fp8_quantize_weight");
  CallOptions options;
  options.cache_weights = cache;
  options.fused_kernels = fused;
  const Quantized q = quantize_weight(weight, weight_recipe(dtype, scaling, history, margin), options);
  if (!cache) return {q.data, q.inv_scale};
  return {q.data.clone(), q.inv_scale.clone()};
}

at::Tensor amax(const at::Tensor& x, bool fused) {
  check_source(x, "fp8_amax");
  return primitives_for(x.device().type(), fused).amax(x.contiguous());
}

Pair scale_cast(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType dtype, bool fused) {
  check_source(x, "fp8_scale_cast");
  check_scale(scale, x);
  at::Tensor amax;
  at::Tensor data = primitives_for(x.device().type(), fused).cast(x.contiguous(), scale, dtype, &amax);
  return {std::move(data), std::move(amax)};
}

Pair scale_from_amax(const at::Tensor& amax, c10::ScalarType dtype, std::int64_t margin, bool fused) {
  check_amax(amax);
  check_margin(margin, "fp8_scale_from_amax");
  at::Tensor scale = at::empty({}, amax.options());
  at::Tensor inv = at::empty({}, amax.options());
  primitives_for(amax.device().type(), fused)
      .scale_from_amax(amax, kernels::fp8::fp8_max(format_of(dtype)), static_cast<std::int32_t>(margin), scale, inv);
  return {std::move(scale), std::move(inv)};
}

// --- Fake kernels: shapes, dtypes and devices only -----------------------------------------------

Pair quantize_meta(const at::Tensor& x, c10::ScalarType dtype, std::int64_t margin, bool /*fused*/) {
  check_source(x, "fp8_quantize");
  check_margin(margin, "fp8_quantize");
  return {fp8_like(x, dtype), scalar_like(x)};
}

Pair quantize_weight_meta(const at::Tensor& weight, c10::ScalarType dtype, c10::string_view scaling,
                          std::int64_t history, std::int64_t margin, bool /*cache*/, bool /*fused*/) {
  check_source(weight, "fp8_quantize_weight");
  (void)weight_recipe(dtype, scaling, history, margin);
  return {fp8_like(weight, dtype), scalar_like(weight)};
}

at::Tensor amax_meta(const at::Tensor& x, bool /*fused*/) {
  check_source(x, "fp8_amax");
  return scalar_like(x);
}

Pair scale_cast_meta(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType dtype, bool /*fused*/) {
  check_source(x, "fp8_scale_cast");
  check_scale(scale, x);
  return {fp8_like(x, dtype), scalar_like(x)};
}

Pair scale_from_amax_meta(const at::Tensor& amax, c10::ScalarType dtype, std::int64_t margin, bool /*fused*/) {
  check_amax(amax);
  check_margin(margin, "fp8_scale_from_amax");
  (void)format_of(dtype);
  return {at::empty({}, amax.options()), at::empty({}, amax.options())};
}

// Note [non-differentiable ops]
// Quantisation has no gradient that autograd should follow (the fp8 GEMM's own backward routes
// gradients around it, Note [fp8 autograd]). The Autograd kernel says so explicitly: it runs the
// op below autograd, so its outputs never require grad, and opcheck finds a registration instead of
// PyTorch's "autograd not implemented" fallback.
}  // namespace

void below_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, ::torch::jit::Stack* stack) {
  const at::AutoDispatchBelowADInplaceOrView guard;
  op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
}

}  // namespace autocastgen::fp8::detail

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  // Current scaling of any tensor: (fp8 data in x's shape, contiguous; 0-dim float32 1/scale).
  m.def("fp8_quantize(Tensor x, ScalarType dtype, int margin=0, bool fused=True) -> (Tensor, Tensor)");
  // A weight's fp8 copy as the fp8 GEMMs make it: this thread's weight cache and, under delayed
  // scaling, the weight's amax history (keyed on the weight itself, so pass the parameter).
  m.def("fp8_quantize_weight(Tensor weight, ScalarType dtype, str scaling=\"current\", int amax_history_len=16, "
        "int margin=0, bool cache=True, bool fused=True) -> (Tensor, Tensor)");
  // The primitives, for bit-exact tests against PyTorch's own ops.
  m.def("fp8_amax(Tensor x, bool fused=True) -> Tensor");
  m.def("fp8_scale_cast(Tensor x, Tensor scale, ScalarType dtype, bool fused=True) -> (Tensor, Tensor)");
  m.def("fp8_scale_from_amax(Tensor amax, ScalarType dtype, int margin=0, bool fused=True) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  using namespace autocastgen::fp8::detail;  // NOLINT
  m.impl("fp8_quantize", TORCH_FN(quantize));
  m.impl("fp8_quantize_weight", TORCH_FN(quantize_weight_op));
  m.impl("fp8_amax", TORCH_FN(amax));
  m.impl("fp8_scale_cast", TORCH_FN(scale_cast));
  m.impl("fp8_scale_from_amax", TORCH_FN(scale_from_amax));
}

TORCH_LIBRARY_IMPL(autocastgen, Meta, m) {
  using namespace autocastgen::fp8::detail;  // NOLINT
  m.impl("fp8_quantize", TORCH_FN(quantize_meta));
  m.impl("fp8_quantize_weight", TORCH_FN(quantize_weight_meta));
  m.impl("fp8_amax", TORCH_FN(amax_meta));
  m.impl("fp8_scale_cast", TORCH_FN(scale_cast_meta));
  m.impl("fp8_scale_from_amax", TORCH_FN(scale_from_amax_meta));
}

TORCH_LIBRARY_IMPL(autocastgen, Autograd, m) {
  for (const char* name : {"fp8_quantize", "fp8_quantize_weight", "fp8_amax", "fp8_scale_cast", "fp8_scale_from_amax"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autocastgen::fp8::detail::below_autograd>());
  }
}
