// Forward GEMM operands to fp8: weights through the per-thread cache (and delayed scaling), the rest current-scaled.
#include "operand.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "delayed_state.h"
#include "weight_cache.h"

namespace autocastgen::fp8::detail {
namespace {

// Note [fp8 weights]
// A weight is what PyTorch's autocast cache also treats as one: a leaf that requires grad and is
// not a view (a parameter). Only weights are cached and delayed-scaled: their identity is stable
// across calls and steps. Activations and gradients have no identity the dispatcher could key a
// history on (a new tensor at every call, and one weight may meet many activations in a scope),
// so they are current-scaled: one extra read of the tensor buys a scale that always fits it.
bool is_weight(const at::Tensor& t) { return t.is_leaf() && t.requires_grad() && !t.is_view(); }

// W when t is W.t() for a 2-D weight W: `x @ W.t()` (torch.matmul's mm) then shares W's fp8 copy
// with F.linear(x, W).
std::optional<at::Tensor> transposed_weight(const at::Tensor& t) {
  if (!t.is_view() || t.dim() != 2) return std::nullopt;
  const at::Tensor base(t._base());
  if (!base.defined() || base.dim() != 2 || !is_weight(base)) return std::nullopt;
  if (t.size(0) != base.size(1) || t.size(1) != base.size(0) || t.stride(0) != base.stride(1) ||
      t.stride(1) != base.stride(0) || t.storage_offset() != base.storage_offset()) {
    return std::nullopt;
  }
  return base;
}

Quantized quantize_weight(const at::Tensor& w, const Recipe& recipe, const CallOptions& options) {
  const auto margin = static_cast<std::int32_t>(recipe.margin);
  const WeightCacheKey key{w.unsafeGetTensorImpl(), recipe.forward_dtype, recipe.scaling, margin,
                           c10::InferenceMode::is_enabled()};
  if (options.cache_weights) {
    if (const Quantized* hit = find_cached_weight(key, w)) return *hit;
  }
  count_weight_quantization(w.device().type());
  const Primitives& p = primitives_for(w.device().type(), options.fused_kernels);
  const at::Tensor src = w.detach().contiguous();
  Quantized q;
  if (recipe.scaling == Scaling::Delayed) {
    q = with_delayed_state(w, recipe.forward_dtype, static_cast<std::int32_t>(recipe.amax_history_len), margin,
                           [&](DelayedState& s) { return quantize_delayed(p, src, recipe.forward_dtype, s); });
  } else {
    q = quantize_current(p, src, recipe.forward_dtype, margin);
  }
  if (options.cache_weights) cache_weight(key, w, q);
  return q;
}

}  // namespace

Quantized quantize_forward_operand(const at::Tensor& t, const Recipe& recipe, const CallOptions& options) {
  if (is_weight(t)) return quantize_weight(t, recipe, options);
  if (const std::optional<at::Tensor> w = transposed_weight(t)) {
    Quantized q = quantize_weight(*w, recipe, options);
    return {q.data.t(), q.inv_scale};
  }
  const Primitives& p = primitives_for(t.device().type(), options.fused_kernels);
  return quantize_current(p, t.detach().contiguous(), recipe.forward_dtype, static_cast<std::int32_t>(recipe.margin));
}

Quantized quantize_gradient(const at::Tensor& g, const Recipe& recipe, const CallOptions& options) {
  const Primitives& p = primitives_for(g.device().type(), options.fused_kernels);
  return quantize_current(p, g.contiguous(), recipe.backward_dtype, static_cast<std::int32_t>(recipe.margin));
}

}  // namespace autocastgen::fp8::detail
