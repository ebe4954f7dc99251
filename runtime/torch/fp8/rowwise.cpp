// Row-wise fp8 GEMMs: per-row power-of-two scales, the autograd function, the ops fp8_quantize_*rowwise.
//
// Note [fp8 rowwise]
// The rowwise granularities give each GEMM operand one scale per slice along the GEMM's reduced
// (inner) dimension, as torchao's "rowwise" recipe does. For A [M, K] x B [K, N] (B = W^T for
// linear, W [N, K]):
// - forward, out = A x B: A per row (amax over K, scales [M, 1]), B per column (amax over K,
//   [1, N]; for linear W per row);
// - grad A = G x B^T: G per row (amax over N, [M, 1]), B^T per column (amax over N, [1, K]; for
//   linear W per column);
// - grad B = A^T x G: A^T per row (A per column, amax over M, [K, 1]), G per column (amax over M,
//   [1, N]); for linear grad W = G^T x A: G per column ([N, 1]) and A per column ([1, K]).
// Every operand is float8_e4m3fn (the recipe's backward must say so, checked where it is read),
// and every scale is a power of two: s = 2^floor(log2(fp8_max / amax / 2^margin)), found by keeping
// the exponent bits of the float32 scale (exact; amax 0 gives 1, a non-finite amax NaN, as the
// tensorwise rule does). A power of two makes dequantisation exact (x8 * 2^-k), so the scaled
// product is the float32 product of the dequantised operands. Scales are always current: delayed
// scaling is refused with row-wise scales.
//
// rowwise_with_gw_hp: the same, except that grad W (grad B) is a GEMM in the call's output dtype
// (the lower-precision dtype) of G and A cast to it, row-major, with no fp8 (the forward saves A in
// that dtype), and B^T for grad A is scaled tensorwise (the weight's ordinary tensorwise fp8 copy, the
// scale repeated per column), as torchao's rowwise_with_gw_hp does.
//
// The GEMM, A8 [M, K] with inverse scales sa [M, 1] and B8 [K, N] with sb [1, N]:
// - on CUDA (and any device other than the CPU): at::_scaled_mm with row-wise scales, A row-major,
//   B column-major, the scales float32 with stride 1 in their last dimension ([1, N] made by
//   reshape, not by transposing an [N, 1]), out bfloat16 (the only output dtype CUDA's row-wise
//   kernels give) and the bias, if any, in bfloat16;
// - on the CPU: PyTorch 2.11's CPU _scaled_mm takes per-tensor scales only (2.15's takes row-wise
//   ones), so the CPU computes the same arithmetic with PyTorch ops on every release: the row-major
//   float32 products A8 * sa and B8 * sb, their float32 mm, the bias added in float32, rounded to
//   bfloat16 once. That equals 2.15's CPU _scaled_mm with row-wise scales bit for bit
//   (tests/fp8/test_fp8_rowwise.py checks it where _scaled_mm takes them).
// Either way the product is bfloat16, then converted to the dtype asked for (a float32 parameter's
// gradient is the bfloat16 product widened; a float16 or float32 output is rounded through
// bfloat16 first). An addmm's add that is not a bias is added after the GEMM in float32.
//
// Quantisation with row-wise scales: on real tensors (eager, and the kernels of the ops a compiled
// graph calls) one fused kernel per operand and axis, Primitives::rowwise_cast (CPU and CUDA,
// kernels/fp8; Note [fp8 rowwise kernels] in fp8_cuda.cu), an amax per slice, the scale and the
// saturating cast in one launch (three per column on CUDA). Traced code (FakeTensors, functional
// tensors, any dispatch mode, DTensor) records PyTorch ops instead (quantize_rows_with_ops: abs, amax
// over a dimension, aten_power_of_two_scale, the saturating cast), which Inductor fuses into its
// own kernels. The two must give the same bits, or aot_eager would differ from eager: the scale rule
// is kernels::fp8::power_of_two_scale, and the ops form is built from the same two steps
// (Note [fp8 power-of-two scale]); the cast is the tensorwise one (Note [fp8 cast]); and
// tests/fp8/test_fp8_rowwise.py compares the two quantisers bit for bit through the op
// fp8_quantize_rowwise (fused=True/False; CUDA in test_fp8_cuda.py). CallOptions::fused_kernels
// false takes the ops in eager code too. The CUDA kernels were checked bit for bit against the ops on
// an H100 (tests/fp8/test_fp8_cuda.py, 2026-11-27). Weights go through this thread's weight cache (Note [fp8
// weight cache]) with the reduced dimension in the key, so a weight's tensorwise copy and its two
// row-wise copies are separate entries; under tracing through the op fp8_quantize_weight_rowwise
// (Note [fp8 under tracing]), whose kernel quantises fused.
//
// Under tensor parallel (DTensor operands met eagerly) the rowwise granularities are refused at the
// support rule and run in the lower-precision dtype: a row's scale spans the reduced dimension, which
// RowwiseParallel shards (the forward's A and B), and ColwiseParallel's output gradient is sharded
// along N, which grad A reduces over; exact per-shard scales would need an all-reduce of every row's
// amax.
#include "rowwise.h"

#include <optional>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/torch/compat.h"
#include "operand.h"
#include "weight_cache.h"

namespace autocastgen::fp8::detail {

// The weight cache's row-wise copy of a real weight, computed now (the op's kernel and eager code).
Quantized quantize_weight_rows_now(const at::Tensor& w, std::int64_t reduced_dim, c10::ScalarType fp8,
                                   std::int64_t margin, bool cache, bool fused);

namespace {

namespace k8 = kernels::fp8;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;
using Pair = std::tuple<at::Tensor, at::Tensor>;

// Inverse scales with stride 1 in the last dimension, as _scaled_mm wants them.
at::Tensor as_column(const at::Tensor& inv) { return inv.reshape({-1, 1}); }
at::Tensor as_row(const at::Tensor& inv) { return inv.reshape({1, -1}); }
at::Tensor times(const at::Tensor& inv, double alpha) { return alpha == 1.0 ? inv : inv * alpha; }

// Row-major copy of a 2-D fp8 tensor (the device's byte transpose for a transposed view, Note
// [byte transpose]).
at::Tensor row_major(const at::Tensor& x) {
  if (x.is_contiguous()) return x;
  if (x.t().is_contiguous() && !traced(x)) {
    if (std::optional<at::Tensor> t = primitives_for(x.device().type(), true).transpose(x.t())) return *std::move(t);
  }
  return x.contiguous();
}

// Note [fp8 rowwise internals skip autocast]
// The GEMMs here are PyTorch's mm (the CPU route, rowwise_with_gw_hp's weight gradient). A backward
// traced by AOTAutograd inside the autocast region that traced the forward would send them to the
// Autocast keys, where an fp8 list's mm would quantise them again (eager's backward runs outside
// autocast); so they run with the Autocast keys excluded, in eager and traced code alike.
struct NoAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::autocast_dispatch_keyset};
};

// Note [fp8 rowwise], "The GEMM": a8 [M, K] x b8 [K, N] with inverse scales sa [M, 1] and sb [1, N]
// (float32), in bfloat16.
at::Tensor rowwise_mm(const at::Tensor& a8, const at::Tensor& sa, const at::Tensor& b8, const at::Tensor& sb,
                      const std::optional<at::Tensor>& bias, bool fast_accum) {
  TORCH_INTERNAL_ASSERT(sa.dim() == 2 && sa.size(1) == 1 && sb.dim() == 2 && sb.size(0) == 1);
  const NoAutocast no_autocast;
  if (a8.device().type() == c10::DeviceType::CPU) {
    const at::Tensor a = (a8.to(at::kFloat) * sa).contiguous();
    const at::Tensor b = (b8.to(at::kFloat) * sb).contiguous();
    at::Tensor out = at::mm(a, b);
    if (bias.has_value()) out.add_(bias->to(at::kFloat));
    return out.to(at::kBFloat16);
  }
  const at::Tensor b = row_major(b8.t()).t();
  return ::autocastgen::torch::compat::scaled_mm(row_major(a8), b, sa.contiguous(), sb.contiguous(), bias,
                                                 at::kBFloat16, fast_accum);
}

// An operand with row-wise scales: a weight (or W.t()) through the cache, anything else now.
Quantized operand_rows(const at::Tensor& t, std::int64_t reduced_dim, const Recipe& recipe, const CallOptions& options) {
  const bool fused = options.fused_kernels;
  if (is_weight(t)) {
    return quantize_weight_rows(t, reduced_dim, recipe.forward_dtype, recipe.margin, options.cache_weights, fused);
  }
  if (const std::optional<at::Tensor> w = transposed_weight(t)) {
    Quantized q =
        quantize_weight_rows(*w, 1 - reduced_dim, recipe.forward_dtype, recipe.margin, options.cache_weights, fused);
    return {q.data.t(), q.inv_scale.t()};
  }
  return quantize_rows(t, reduced_dim, recipe.forward_dtype, recipe.margin, fused);
}

// Note [fp8 rowwise] for the autograd function; everything else as Note [fp8 autograd] in gemm.cpp.
class Fp8RowwiseGemm : public ::torch::autograd::Function<Fp8RowwiseGemm> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const std::optional<at::Tensor>& add_or_none, const RowwiseSpec& spec) {
    const at::Tensor add = add_or_none.value_or(at::Tensor());
    const Recipe& recipe = spec.recipe;
    const bool gw_hp = recipe.granularity == Granularity::RowwiseWithGwHp;
    const std::int64_t k = spec.linear ? b.size(1) : b.size(0);
    const std::int64_t n = spec.linear ? b.size(0) : b.size(1);
    const at::Tensor a2 = spec.linear ? a.reshape({-1, k}) : a;

    const Quantized qa = operand_rows(a2, 1, recipe, spec.options);                    // [M, 1]
    const Quantized qb = operand_rows(b, spec.linear ? 1 : 0, recipe, spec.options);  // W [N, 1] / B [1, N]
    const at::Tensor b8 = spec.linear ? qb.data.t() : qb.data;

    std::optional<at::Tensor> gemm_bias;
    bool add_after = false;
    if (add.defined() && spec.beta != 0.0) {
      if (spec.beta == 1.0 && add.dim() == 1 && add.size(0) == n && spec.out_dtype == c10::ScalarType::BFloat16) {
        gemm_bias = add.to(at::kBFloat16);
      } else {
        add_after = true;
      }
    }
    at::Tensor out = rowwise_mm(qa.data, times(as_column(qa.inv_scale), spec.alpha), b8, as_row(qb.inv_scale),
                                gemm_bias, /*fast_accum=*/true);
    if (add_after) {
      const at::Tensor sum = spec.beta == 1.0 ? out.to(at::kFloat).add_(add.to(at::kFloat))
                                              : out.to(at::kFloat).add_(add.to(at::kFloat), spec.beta);
      out = sum.to(spec.out_dtype);
    } else {
      out = out.to(spec.out_dtype);
    }
    if (spec.linear) {
      std::vector<std::int64_t> sizes(a.sizes().begin(), a.sizes().end() - 1);
      sizes.push_back(n);
      out = at::_unsafe_view(out, sizes);
    }

    // B^T [N, K] for grad A, and A (per column, or in the output dtype) for grad B.
    at::Tensor bt8;
    at::Tensor inv_bt;
    if (spec.grad_a) {
      if (gw_hp) {
        Recipe tensorwise = recipe;
        tensorwise.granularity = Granularity::Tensorwise;
        const Quantized q = quantize_forward_operand(b, tensorwise, spec.options);
        bt8 = spec.linear ? q.data : q.data.t();
        inv_bt = q.inv_scale.reshape({1, 1}).expand({1, k}).contiguous();
      } else {
        const Quantized q = operand_rows(b, spec.linear ? 0 : 1, recipe, spec.options);  // W [1, K] / B [K, 1]
        bt8 = spec.linear ? q.data : q.data.t();
        inv_bt = as_row(q.inv_scale);
      }
    }
    at::Tensor a_saved;
    at::Tensor inv_a_saved;
    if (spec.grad_b) {
      if (gw_hp) {
        a_saved = a2.detach().to(spec.out_dtype);
      } else {
        const Quantized q =
            quantize_rows(a2, 0, recipe.forward_dtype, recipe.margin, spec.options.fused_kernels);  // [1, K]
        a_saved = q.data;
        inv_a_saved = q.inv_scale;
      }
    }
    ctx->save_for_backward({bt8, inv_bt, a_saved, inv_a_saved});
    ctx->saved_data["linear"] = spec.linear;
    ctx->saved_data["gw_hp"] = gw_hp;
    ctx->saved_data["alpha"] = spec.alpha;
    ctx->saved_data["beta"] = spec.beta;
    ctx->saved_data["n"] = n;
    ctx->saved_data["a_sizes"] = a.sizes();
    ctx->saved_data["a_dtype"] = static_cast<std::int64_t>(a.scalar_type());
    ctx->saved_data["b_dtype"] = static_cast<std::int64_t>(b.scalar_type());
    ctx->saved_data["hp_dtype"] = static_cast<std::int64_t>(spec.out_dtype);
    ctx->saved_data["add"] = add.defined();
    if (add.defined()) {
      ctx->saved_data["add_sizes"] = add.sizes();
      ctx->saved_data["add_dtype"] = static_cast<std::int64_t>(add.scalar_type());
    }
    ctx->saved_data["backward_dtype"] = static_cast<std::int64_t>(recipe.backward_dtype);
    ctx->saved_data["margin"] = recipe.margin;
    ctx->saved_data["fused"] = spec.options.fused_kernels;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    const bool linear = d.at("linear").toBool();
    const bool gw_hp = d.at("gw_hp").toBool();
    const double alpha = d.at("alpha").toDouble();
    const double beta = d.at("beta").toDouble();
    const std::int64_t n = d.at("n").toInt();
    const auto fp8 = static_cast<c10::ScalarType>(d.at("backward_dtype").toInt());
    const std::int64_t margin = d.at("margin").toInt();
    const bool fused = d.at("fused").toBool();
    const at::Tensor& g = grads[0];
    const at::Tensor g2 = linear ? g.reshape({-1, n}) : g;

    at::Tensor grad_a;
    at::Tensor grad_b;
    at::Tensor grad_add;
    if (ctx->needs_input_grad(0)) {
      TORCH_CHECK(saved[0].defined(), "autocastgen fp8 rowwise: the input's gradient was not prepared in the forward");
      const Quantized qg = quantize_rows(g2, 1, fp8, margin, fused);  // [M, 1]
      const auto a_dtype = static_cast<c10::ScalarType>(d.at("a_dtype").toInt());
      grad_a = rowwise_mm(qg.data, times(qg.inv_scale, alpha), saved[0], saved[1], std::nullopt, false)
                   .to(a_dtype)
                   .view(d.at("a_sizes").toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      TORCH_CHECK(saved[2].defined(), "autocastgen fp8 rowwise: the weight's gradient was not prepared in the forward");
      const auto b_dtype = static_cast<c10::ScalarType>(d.at("b_dtype").toInt());
      if (gw_hp) {
        const auto hp = static_cast<c10::ScalarType>(d.at("hp_dtype").toInt());
        // Row-major operands, so that the CPU's GEMM sees the same layouts eager and traced.
        const NoAutocast no_autocast;
        const at::Tensor g_hp = g2.to(hp);
        grad_b = linear ? at::mm(g_hp.t().contiguous(), saved[2].contiguous())
                        : at::mm(saved[2].t().contiguous(), g_hp.contiguous());
        if (alpha != 1.0) grad_b = grad_b * alpha;
        grad_b = grad_b.to(b_dtype);
      } else {
        const Quantized qg = quantize_rows(g2, 0, fp8, margin, fused);  // [1, N]
        grad_b = linear ? rowwise_mm(qg.data.t(), times(as_column(qg.inv_scale), alpha), saved[2], saved[3],
                                     std::nullopt, false)
                        : rowwise_mm(saved[2].t(), times(as_column(saved[3]), alpha), qg.data, qg.inv_scale,
                                     std::nullopt, false);
        grad_b = grad_b.to(b_dtype);
      }
    }
    if (d.at("add").toBool() && ctx->needs_input_grad(2)) {
      grad_add = addend_gradient(g2, beta, d.at("add_sizes").toIntVector(),
                                 static_cast<c10::ScalarType>(d.at("add_dtype").toInt()));
    }
    return {grad_a, grad_b, grad_add, at::Tensor()};
  }
};

void check_reduced_dim(std::int64_t reduced_dim, const at::Tensor& x, const char* who) {
  TORCH_CHECK(x.dim() == 2, who, ": row-wise scales need a 2-D tensor, got ", x.dim(), " dimensions");
  TORCH_CHECK(reduced_dim == 0 || reduced_dim == 1, who, ": reduced_dim must be 0 or 1, got ", reduced_dim);
}

// What the fused row-wise kernels read: float32, bfloat16 or float16 (anything else takes the ops).
bool rowwise_kernel_source(const at::Tensor& x) {
  const c10::ScalarType t = x.scalar_type();
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// --- torch.ops.autocastgen.fp8_quantize_weight_rowwise ---------------------------------------------

Pair quantize_weight_rowwise_op(const at::Tensor& weight, c10::ScalarType dtype, std::int64_t reduced_dim,
                                std::int64_t margin, bool cache) {
  check_reduced_dim(reduced_dim, weight, "fp8_quantize_weight_rowwise");
  TORCH_CHECK(margin >= 0 && margin <= 64, "fp8_quantize_weight_rowwise: margin must be in [0, 64], got ", margin);
  const Quantized q = quantize_weight_rows_now(weight, reduced_dim, dtype, margin, cache, /*fused=*/true);
  if (!cache) return {q.data, q.inv_scale};
  return {q.data.clone(), q.inv_scale.clone()};  // Note [fp8 op outputs are fresh]
}

Pair quantize_weight_rowwise_meta(const at::Tensor& weight, c10::ScalarType dtype, std::int64_t reduced_dim,
                                  std::int64_t margin, bool /*cache*/) {
  check_reduced_dim(reduced_dim, weight, "fp8_quantize_weight_rowwise");
  TORCH_CHECK(margin >= 0 && margin <= 64, "fp8_quantize_weight_rowwise: margin must be in [0, 64], got ", margin);
  (void)format_of(dtype);
  std::vector<c10::SymInt> inv_sizes(weight.sym_sizes().begin(), weight.sym_sizes().end());
  inv_sizes.at(static_cast<std::size_t>(reduced_dim)) = 1;
  return {at::empty_symint(weight.sym_sizes(), weight.options().dtype(dtype)),
          at::empty_symint(inv_sizes, weight.options().dtype(at::kFloat))};
}

// --- torch.ops.autocastgen.fp8_quantize_rowwise (the two quantisers, for tests and benchmarks) -----

void check_rowwise_op(const at::Tensor& x, std::int64_t reduced_dim, std::int64_t margin) {
  check_reduced_dim(reduced_dim, x, "fp8_quantize_rowwise");
  TORCH_CHECK(rowwise_kernel_source(x), "fp8_quantize_rowwise: cannot quantise a ", x.scalar_type(),
              " tensor (float32, bfloat16 or float16 only)");
  TORCH_CHECK(margin >= 0 && margin <= 64, "fp8_quantize_rowwise: margin must be in [0, 64], got ", margin);
}

Pair quantize_rowwise_op(const at::Tensor& x, c10::ScalarType dtype, std::int64_t reduced_dim, std::int64_t margin,
                         bool fused) {
  check_rowwise_op(x, reduced_dim, margin);
  std::optional<Quantized> q;
  if (fused && x.numel() > 0) {
    q = primitives_for(x.device().type(), true)
            .rowwise_cast(x.detach().contiguous(), reduced_dim, dtype, static_cast<std::int32_t>(margin));
  }
  if (!q) q = quantize_rows_with_ops(x, reduced_dim, dtype, margin);
  return {std::move(q->data), std::move(q->inv_scale)};
}

Pair quantize_rowwise_meta(const at::Tensor& x, c10::ScalarType dtype, std::int64_t reduced_dim, std::int64_t margin,
                           bool /*fused*/) {
  check_rowwise_op(x, reduced_dim, margin);
  (void)format_of(dtype);
  std::vector<c10::SymInt> inv_sizes(x.sym_sizes().begin(), x.sym_sizes().end());
  inv_sizes.at(static_cast<std::size_t>(reduced_dim)) = 1;
  return {at::empty_symint(x.sym_sizes(), x.options().dtype(dtype)),
          at::empty_symint(inv_sizes, x.options().dtype(at::kFloat))};
}

}  // namespace

Quantized quantize_rows_with_ops(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8,
                                 std::int64_t margin) {
  check_reduced_dim(reduced_dim, x, "autocastgen fp8 rowwise");
  const NoAutocast no_autocast;
  const float max = k8::fp8_max(format_of(fp8));
  const at::Tensor src = x.detach();
  const at::Tensor amax = src.abs().amax({reduced_dim}, /*keepdim=*/true).to(at::kFloat);
  const at::Tensor scale = aten_power_of_two_scale(amax, max, static_cast<std::int32_t>(margin));
  at::Tensor data = (src.to(at::kFloat) * scale).clamp(-max, max).to(fp8).contiguous();
  return {std::move(data), scale.reciprocal()};
}

Quantized quantize_rows(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8, std::int64_t margin,
                        bool fused) {
  check_reduced_dim(reduced_dim, x, "autocastgen fp8 rowwise");
  // Note [fp8 rowwise], "Quantisation": the fused kernel on real tensors, the same bits as the ops.
  if (fused && x.numel() > 0 && rowwise_kernel_source(x) && !traced(x)) {
    if (std::optional<Quantized> q = primitives_for(x.device().type(), true)
                                         .rowwise_cast(x.detach().contiguous(), reduced_dim, fp8,
                                                       static_cast<std::int32_t>(margin))) {
      return *std::move(q);
    }
  }
  return quantize_rows_with_ops(x, reduced_dim, fp8, margin);
}

Quantized quantize_weight_rows_now(const at::Tensor& w, std::int64_t reduced_dim, c10::ScalarType fp8,
                                   std::int64_t margin, bool cache, bool fused) {
  const WeightCacheKey key{w.unsafeGetTensorImpl(), fp8, Scaling::Current, static_cast<std::int32_t>(margin),
                           c10::InferenceMode::is_enabled(), static_cast<std::int8_t>(reduced_dim)};
  if (cache) {
    if (const Quantized* hit = find_cached_weight(key, w)) return *hit;
  }
  count_weight_quantization(w.device().type());
  Quantized q = quantize_rows(w, reduced_dim, fp8, margin, fused);
  if (cache) cache_weight(key, w, q);
  return q;
}

Quantized quantize_weight_rows(const at::Tensor& w, std::int64_t reduced_dim, c10::ScalarType fp8, std::int64_t margin,
                               bool cache, bool fused) {
  if (!traced(w)) return quantize_weight_rows_now(w, reduced_dim, fp8, margin, cache, fused);
  if (exporting_program()) return quantize_rows_with_ops(w, reduced_dim, fp8, margin);  // Note [fp8 in an exported program]
  // Note [fp8 under tracing]: the trace records the op; its kernel runs the cache in the compiled step.
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("autocastgen::fp8_quantize_weight_rowwise", "")
                             .typed<Pair(const at::Tensor&, c10::ScalarType, int64_t, int64_t, bool)>();
  auto [data, inv] = op.call(w, fp8, reduced_dim, margin, cache);
  return {std::move(data), std::move(inv)};
}

at::Tensor rowwise_gemm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& add,
                        const RowwiseSpec& spec) {
  return Fp8RowwiseGemm::apply(a, b, add, spec);
}

}  // namespace autocastgen::fp8::detail

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  // A weight's fp8 copy with row-wise scales (Note [fp8 rowwise]), through this thread's weight
  // cache: (fp8 data in the weight's shape; float32 1/scale with the weight's shape, reduced_dim 1).
  m.def("fp8_quantize_weight_rowwise(Tensor weight, ScalarType dtype, int reduced_dim, int margin=0, "
        "bool cache=True) -> (Tensor, Tensor)");
  // Any 2-D tensor with row-wise scales, now: the fused kernel (fused=True, where the device has
  // one) or the PyTorch ops the traced path records; both give the same bits (tests/fp8).
  m.def("fp8_quantize_rowwise(Tensor x, ScalarType dtype, int reduced_dim, int margin=0, bool fused=True) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  m.impl("fp8_quantize_weight_rowwise", TORCH_FN(autocastgen::fp8::detail::quantize_weight_rowwise_op));
  m.impl("fp8_quantize_rowwise", TORCH_FN(autocastgen::fp8::detail::quantize_rowwise_op));
}

TORCH_LIBRARY_IMPL(autocastgen, Meta, m) {
  m.impl("fp8_quantize_weight_rowwise", TORCH_FN(autocastgen::fp8::detail::quantize_weight_rowwise_meta));
  m.impl("fp8_quantize_rowwise", TORCH_FN(autocastgen::fp8::detail::quantize_rowwise_meta));
}

TORCH_LIBRARY_IMPL(autocastgen, Autograd, m) {
  for (const char* name : {"fp8_quantize_weight_rowwise", "fp8_quantize_rowwise"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autocastgen::fp8::detail::below_autograd>());
  }
}
