// Forward GEMM operands to fp8: weights through the per-thread cache (and delayed scaling), the rest current-scaled.
#include "operand.h"

#include <cstdlib>
#include <string_view>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/function.h>

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
//
// A trace loses leafness: AOTAutograd gives every graph input that requires grad a placeholder
// grad_fn (autograd's Error node, no edges). Under tracing such an input counts as a weight, so a
// parameter is one in compiled code as in eager; a non-leaf graph input that requires grad does too
// (docs/fp8.md, "torch.compile").
bool traced_graph_input(const at::Tensor& t) {
  const auto& fn = t.grad_fn();
  return fn != nullptr && fn->next_edges().empty() && fn->name() == "torch::autograd::Error";
}

}  // namespace

bool is_weight(const at::Tensor& t) {
  if (!t.requires_grad() || t.is_view()) return false;
  return t.is_leaf() || (traced(t) && traced_graph_input(t));
}

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

namespace {

using QuantizedPair = std::tuple<at::Tensor, at::Tensor>;

// The traced path: the dispatcher ops of primitive_ops.cpp, which the trace records.
Quantized weight_op(const at::Tensor& w, const Recipe& recipe, const CallOptions& options) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("autocastgen::fp8_quantize_weight", "")
          .typed<QuantizedPair(const at::Tensor&, c10::ScalarType, c10::string_view, int64_t, int64_t, bool, bool)>();
  auto [data, inv] = op.call(w, recipe.forward_dtype, scaling_name(recipe.scaling), recipe.amax_history_len,
                             recipe.margin, options.cache_weights, options.fused_kernels);
  return {std::move(data), std::move(inv)};
}

// Note [fp8 traced route]
// How a trace quantises an activation or a gradient (always current-scaled):
// - "decompose" (the default): the unfused ATen primitives (Note [unfused reference] in
//   quantize.cpp): amax, the scale rule and the saturating cast as PyTorch ops. Inductor fuses them
//   into the kernels around them (the amax into the op that made the tensor, the cast writing the
//   layout the GEMM wants), as torchao's Float8Linear does; aot_eager runs them as they are, and they
//   give the fused kernels' bits (tests/fp8), so eager and aot_eager still agree bit for bit.
// - "opaque": one fp8_quantize op, which runs our fused kernel (no fusion around it).
// AUTOCASTGEN_FP8_TRACE chooses, read when tracing (bench/gpu/fp8_linear.py times both). Weights
// always go through fp8_quantize_weight: the weight cache and delayed scaling live in its kernel.
bool decompose_when_traced() {
  const char* value = std::getenv("AUTOCASTGEN_FP8_TRACE");
  const std::string_view route = value == nullptr ? "" : value;
  if (route.empty() || route == "decompose") return true;
  TORCH_CHECK(route == "opaque", "AUTOCASTGEN_FP8_TRACE=", route, ": expected 'decompose' (the default) or 'opaque'");
  return false;
}

Quantized current_op(const at::Tensor& x, c10::ScalarType fp8, std::int64_t margin, const CallOptions& options) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("autocastgen::fp8_quantize", "")
                             .typed<QuantizedPair(const at::Tensor&, c10::ScalarType, int64_t, bool)>();
  auto [data, inv] = op.call(x, fp8, margin, options.fused_kernels);
  return {std::move(data), std::move(inv)};
}

// Note [fp8 in an exported program]
// autocastgen.export traces a program that runs without autocastgen: no op of ours may be in it,
// and it holds no state from call to call. While it traces (exporting_program()), a weight is
// quantised as an activation is, current-scaled by PyTorch's ops (the decompose route of Note [fp8
// traced route], whatever AUTOCASTGEN_FP8_TRACE says): eager's current scaling quantises a weight
// once per scope from the weight alone, so the bits are eager's. Delayed scaling's scale comes
// from a history of earlier calls, which a program cannot keep: refused.
thread_local bool t_exporting = false;

Quantized weight_operand(const at::Tensor& w, const Recipe& recipe, const CallOptions& options) {
  if (!traced(w)) return quantize_weight(w, recipe, options);
  if (!t_exporting) return weight_op(w, recipe, options);
  TORCH_CHECK(recipe.scaling == Scaling::Current,
              "autocastgen.export: the fp8 recipe's delayed scaling takes a weight's scale from the amaxes of earlier "
              "calls, which a program cannot keep; export with `fp8: {scaling: current}`");
  return quantize_current(primitives_for(w.device().type(), /*fused=*/false), w.detach().contiguous(),
                          recipe.forward_dtype, static_cast<std::int32_t>(recipe.margin));
}

Quantized current_operand(const at::Tensor& x, c10::ScalarType fp8, std::int64_t margin, const CallOptions& options) {
  const auto margin32 = static_cast<std::int32_t>(margin);
  if (traced(x)) {
    // A subclass met eagerly quantises through the op, which its rule runs on the local shards;
    // the PyTorch-ops route would mix it with the plain scalars it fills.
    if (eager_subclass(x) || (!decompose_when_traced() && !t_exporting)) return current_op(x, fp8, margin, options);
    return quantize_current(primitives_for(x.device().type(), /*fused=*/false), x.detach().contiguous(), fp8, margin32);
  }
  const Primitives& p = primitives_for(x.device().type(), options.fused_kernels);
  return quantize_current(p, x.detach().contiguous(), fp8, margin32);
}

}  // namespace

// Note [fp8 under tracing]
// torch.compile runs the model on tensors without data (Dynamo's FakeTensors, AOTAutograd's
// FunctionalTensors over them) and records the ops they reach. A kernel that reads data pointers
// cannot run there, and work done outside the dispatcher would not be recorded. So when an operand
// is not a real tensor (a Python tensor subclass, a meta tensor, or any tensor while a
// TorchDispatchMode is active), the GEMM quantises through the ops fp8_quantize and
// fp8_quantize_weight: their fake (Meta) kernels give the trace shapes and dtypes, the graph holds
// them as opaque ops, and the compiled graph later runs the very kernels eager runs (aot_eager:
// the same bits; activations and gradients may take PyTorch's ops instead, Note [fp8 traced
// route]). The weight cache and the delayed-scaling state are touched only by those kernels
// on real tensors: a trace neither reads nor fills them, and a compiled step quantises, hits the
// cache and advances a weight's history where eager does. Real tensors outside any mode take the
// direct path, which saves a dispatch per operand and the copy of Note [fp8 op outputs are fresh].
bool dataless(const at::Tensor& t) {
  return t.is_meta() ||
         t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}

bool traced(const at::Tensor& t) { return dataless(t) || c10::impl::TorchDispatchModeTLS::stack_len() > 0; }

bool exporting_program() { return t_exporting; }

bool set_exporting_program(bool on) { return std::exchange(t_exporting, on); }

bool eager_subclass(const at::Tensor& t) {
  return t.defined() && t.key_set().has(c10::DispatchKey::Python) && c10::impl::TorchDispatchModeTLS::stack_len() == 0;
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

Quantized quantize_forward_operand(const at::Tensor& t, const Recipe& recipe, const CallOptions& options) {
  if (is_weight(t)) return weight_operand(t, recipe, options);
  if (const std::optional<at::Tensor> w = transposed_weight(t)) {
    Quantized q = weight_operand(*w, recipe, options);
    return {q.data.t(), q.inv_scale};
  }
  return current_operand(t, recipe.forward_dtype, recipe.margin, options);
}

Quantized quantize_gradient(const at::Tensor& g, const Recipe& recipe, const CallOptions& options) {
  return current_operand(g, recipe.backward_dtype, recipe.margin, options);
}

at::Tensor addend_gradient(const at::Tensor& g2, double beta, const std::vector<std::int64_t>& sizes,
                           c10::ScalarType dtype) {
  if (beta == 1.0 && sizes == std::vector<std::int64_t>{g2.size(-1)})
    return g2.sum(0, false, c10::ScalarType::Float).to(dtype);
  at::Tensor gf = g2.to(c10::ScalarType::Float);
  if (beta != 1.0) gf = gf * beta;
  return at::sum_to(gf, sizes).to(dtype);
}

}  // namespace autocastgen::fp8::detail
