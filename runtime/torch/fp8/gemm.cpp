// fp8 linear, mm and addmm: the support rule, one autograd function for all three, the public API.
#include <array>
#include <atomic>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/torch/compat.h"
#include "operand.h"
#include "rowwise.h"

namespace autocastgen::fp8 {
namespace {

using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

// --- Support --------------------------------------------------------------------------------------

constexpr Support yes() { return {true, ""}; }
constexpr Support no(const char* reason) { return {false, reason}; }

// Whether the dispatcher has a _scaled_mm kernel for the device's backend (asked once per type).
bool scaled_mm_on(c10::DeviceType device) {
  constexpr auto kTypes = static_cast<std::size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);
  static std::array<std::atomic<int>, kTypes> known{};  // 0 unknown, 1 yes, 2 no
  std::atomic<int>& slot = known.at(static_cast<std::size_t>(device));
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    const auto op = c10::Dispatcher::singleton().findOp({"aten::_scaled_mm", ""});
    const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, c10::kStrided, c10::Device(device));
    v = op && op->hasKernelForDispatchKey(key) ? 1 : 2;
    slot.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

bool float_dtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half;
}

Support check_tensor(const at::Tensor& t, const at::Tensor& first) {
  if (!t.defined()) return no("an operand is undefined");
  if (t.layout() != c10::kStrided) return no("an operand is not a dense (strided) tensor");
  if (!float_dtype(t.scalar_type())) return no("an operand is not float32, bfloat16 or float16");
  if (t.device() != first.device()) return no("the operands are on different devices");
  return yes();
}

// Note [fp8 shapes] in fp8.h.
Support check_shape(std::int64_t m, std::int64_t k, std::int64_t n, bool right_operand_grad) {
  if (m <= 0 || k <= 0 || n <= 0) return no("an empty dimension");
  if (k % 16 != 0) return no("the inner dimension K is not a multiple of 16");
  if (n % 16 != 0) return no("the output dimension N is not a multiple of 16");
  if (right_operand_grad && m % 16 != 0) {
    return no("the weight (mat2) needs a gradient and the row count M is not a multiple of 16");
  }
  return yes();
}

// Note [fp8 shapes] decides by concrete sizes; a trace with symbolic ones (torch.compile with
// dynamic shapes) cannot take that decision once for every size, so it stops with a way out.
void require_static_shapes(const std::vector<const at::Tensor*>& operands) {
  for (const at::Tensor* t : operands) {
    TORCH_CHECK(!t->defined() || !t->unsafeGetTensorImpl()->has_symbolic_sizes_strides(),
                "autocastgen fp8: the fp8 policy decides fp8 or not by concrete shapes (multiples of 16) and this "
                "trace has symbolic shapes: compile with torch.compile(..., dynamic=False) or mark the sizes static "
                "(torch._dynamo.mark_static)");
  }
}

Support check_common(const std::vector<const at::Tensor*>& operands, c10::ScalarType out_dtype) {
  require_static_shapes(operands);
  if (!float_dtype(out_dtype)) return no("out_dtype is not bfloat16, float16 or float32");
  for (const at::Tensor* t : operands) {
    if (const Support s = check_tensor(*t, *operands.front()); !s) return s;
  }
  if (!scaled_mm_on(operands.front()->device().type())) return no("this device's PyTorch has no _scaled_mm kernel");
  return yes();
}

bool will_need_grad(const at::Tensor& t) { return c10::GradMode::is_enabled() && t.requires_grad(); }

// Note [fp8 under tensor parallel]
// A DTensor met eagerly (tensor parallel: ColwiseParallel, RowwiseParallel) runs the fp8 GEMM per
// shard. The GEMM's own code is unchanged: every step that touches data goes through a dispatcher
// op, so DTensor's dispatch runs it on the local shards and no kernel here sees a DTensor:
// - an operand is quantised by fp8_quantize (activations, gradients) or fp8_quantize_weight
//   (weights); autocastgen.distributed gives both a DTensor op handler that measures the local
//   shard's amax, all-reduces it with MAX over the mesh dimensions the operand is sharded on (none
//   for a Replicate operand, whose replicated weight goes through the weight cache and delayed
//   scaling as in one process), and casts the local shard with the scale of that amax: the scale of
//   the whole tensor, so every shard holds exactly the fp8 values and scale the unsharded model
//   computes, and the fp8 data may be laid side by side or summed across ranks as one tensor;
// - aten._scaled_mm has DTensor sharding rules; its bias is not among them, so with DTensor
//   operands the bias (or addmm's self) is added after the GEMM in float32 (DTensor places it:
//   a Replicate bias onto a Partial product is split, not all-reduced);
// - the backward's transposes and copies are DTensor ops, and its output gradient goes through
//   fp8_quantize like an activation.
// Which layouts run: those whose GEMM takes the local shards as they are, with no fp8 data moved
// between ranks (gloo cannot move float8 tensors, and moving high-precision data first is the
// lower-precision path's business). Per mesh dimension, for A [M, K] x B [K, N] (B = weight^T for
// linear): both Replicate; A sharded on M and B Replicate; A Replicate and B sharded on N
// (ColwiseParallel: the output sharded on N); both sharded on K (RowwiseParallel: the output
// Partial, summed by DTensor as in bfloat16). Also: the local shards' dimensions satisfy Note
// [fp8 shapes], and a sharded weight is current-scaled (a delayed history would have to hold
// mesh-wide amaxes). DTensor's answer comes from the op fp8_layout_support, whose DTensor handler
// (autocastgen.distributed) reads placements and global shapes only, so that every rank answers
// alike (a rank that quantised while another fell back would wait forever in the amax
// all-reduce). Any other layout, a subclass without such a rule, or DTensor before
// autocastgen.distributed.register_dtensor_ops() is refused, and the policy's driver runs the call
// in the lower-precision dtype, counts it so and says it once
// (policies/fp8_gemm.cpp). The cost: one 4-byte all-reduce per sharded operand per quantisation
// (docs/distributed.md measures it); under tracing nothing changes (Note [fp8 under tracing]).
bool any_eager_subclass(const std::vector<const at::Tensor*>& operands) {
  for (const at::Tensor* t : operands) {
    if (detail::eager_subclass(*t)) return true;
  }
  return false;
}

// Support::reason is a static string; a subclass rule's reasons are kept here (few distinct ones).
const char* interned(std::string text) {
  static std::mutex mutex;
  static std::set<std::string> strings;
  const std::lock_guard<std::mutex> guard(mutex);
  return strings.insert(std::move(text)).first->c_str();
}

Support subclass_layout(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& add, bool linear,
                        Scaling scaling) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("autocastgen::fp8_layout_support", "")
          .typed<std::string(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
                             c10::string_view)>();
  std::string reason;
  try {
    reason = op.call(a, b, add, linear, scaling_name(scaling));
  } catch (const std::exception& e) {
    // No rule for this subclass (DTensor: autocastgen.distributed.register_dtensor_ops() not run).
    // The rule only reads metadata: nothing was sent between ranks before it failed.
    return no(interned(std::string("a tensor subclass without an fp8 layout rule (for DTensor: "
                                   "autocastgen.distributed.register_dtensor_ops()): ") +
                       std::string(e.what()).substr(0, 200)));
  }
  return reason.empty() ? yes() : no(interned(std::move(reason)));
}

// --- The GEMM -------------------------------------------------------------------------------------

bool is_column_major(const at::Tensor& t) { return t.stride(0) == 1 && t.stride(1) >= std::max<std::int64_t>(1, t.size(0)); }

// x as a row-major tensor. The backward GEMMs meet transposed views of row-major fp8 operands;
// the device's byte transpose copies those far faster than PyTorch's strided copy (on an H200,
// the copies took a third of an eager fp8 MLP step), and anything else is copied.
at::Tensor row_major(const at::Tensor& x, const CallOptions& options) {
  if (x.dim() == 2 && x.t().is_contiguous() && !detail::traced(x)) {
    const detail::Primitives& p = detail::primitives_for(x.device().type(), options.fused_kernels);
    if (std::optional<at::Tensor> t = p.transpose(x.t())) return *std::move(t);
  }
  return x.contiguous();
}

// a [M, K] x b [K, N] in fp8 with dequantisation factors sa and sb. CUDA's _scaled_mm needs a
// row-major and b column-major; other devices get that layout too except CPU, whose _scaled_mm
// takes any strides (unless the caller asks for the CUDA layout everywhere, as tests do). A trace
// gets it too: Inductor's lowering of _scaled_mm demands it on every device, and the CPU kernel
// gives the same bits for either layout (tests/fp8/test_fp8_compile.py compares with eager).
at::Tensor scaled_gemm(at::Tensor a, const at::Tensor& sa, at::Tensor b, const at::Tensor& sb,
                       const std::optional<at::Tensor>& bias, c10::ScalarType out_dtype, bool fast_accum,
                       const CallOptions& options) {
  if (a.device().type() != c10::DeviceType::CPU || options.cuda_layout_everywhere || detail::traced(a)) {
    if (!a.is_contiguous()) a = row_major(a, options);
    if (!is_column_major(b)) b = row_major(b.t(), options).t();
  }
  return ::autocastgen::torch::compat::scaled_mm(a, b, sa, sb, bias, out_dtype, fast_accum);
}

at::Tensor times(const at::Tensor& inv_scale, double alpha) { return alpha == 1.0 ? inv_scale : inv_scale * alpha; }

// What a call computes besides the operands.
struct GemmSpec {
  bool linear = false;  // a is [*, K], b a [N, K] weight (the GEMM's right operand is b^T)
  double alpha = 1.0;
  double beta = 1.0;
  Recipe recipe;
  c10::ScalarType out_dtype = c10::ScalarType::BFloat16;
  CallOptions options;
};

// Note [fp8 autograd]
// One autograd function for linear, mm and addmm: out = beta * add + alpha * (A x B) with A the
// [M, K] view of `a` and B = b (mm, addmm) or b^T (linear). The forward quantises A and B to the
// forward fp8 dtype (Note [fp8 weights]: weights through the cache) and saves the fp8 operands
// and their dequantisation factors, not the high-precision tensors. The backward quantises the
// output gradient G to the backward dtype (current scaling) and runs two more fp8 GEMMs:
// grad A = alpha * G x B^T and grad B = alpha * A^T x G (for linear, grad W = alpha * G^T x A),
// each produced directly in its parameter's dtype; grad add = beta * G summed to add's shape, in
// float32 then add's dtype. The forward GEMM uses fast accumulation and the gradient GEMMs do
// not, as torchao's default recipe does.
class Fp8Gemm : public ::torch::autograd::Function<Fp8Gemm> {
 public:
  // `add` is optional rather than undefined: autograd records a device for every tensor input.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const std::optional<at::Tensor>& add_or_none, const GemmSpec& spec) {
    const at::Tensor add = add_or_none.value_or(at::Tensor());
    const std::int64_t k = spec.linear ? b.size(1) : b.size(0);
    const std::int64_t n = spec.linear ? b.size(0) : b.size(1);
    const at::Tensor a2 = spec.linear ? a.reshape({-1, k}) : a;
    const detail::Quantized qa = detail::quantize_forward_operand(a2, spec.recipe, spec.options);
    const detail::Quantized qb = detail::quantize_forward_operand(b, spec.recipe, spec.options);
    const at::Tensor b8 = spec.linear ? qb.data.t() : qb.data;

    std::optional<at::Tensor> gemm_bias;
    bool add_after = false;
    // DTensor's _scaled_mm takes no bias (Note [fp8 under tensor parallel]). What the GEMM meets
    // decides: a float8 all-gathered weight (Note [float8 all-gather] in
    // python/autocastgen/distributed/_float8_all_gather.py) is a subclass whose fp8 data is a plain tensor.
    const bool subclass = any_eager_subclass({&qa.data, &b8, &add});
    if (add.defined() && spec.beta != 0.0) {
      if (!subclass && spec.beta == 1.0 && add.dim() == 1 && add.size(0) == n &&
          spec.out_dtype != c10::ScalarType::Float) {
        gemm_bias = add.to(spec.out_dtype);
      } else {
        add_after = true;
      }
    }
    const c10::ScalarType gemm_dtype = add_after ? c10::ScalarType::Float : spec.out_dtype;
    at::Tensor out = scaled_gemm(qa.data, times(qa.inv_scale, spec.alpha), b8, qb.inv_scale, gemm_bias, gemm_dtype,
                                 /*fast_accum=*/true, spec.options);
    if (add_after) {
      const at::Tensor addf = add.to(c10::ScalarType::Float);
      if (subclass) {
        out = out.add(addf, spec.beta).to(spec.out_dtype);  // DTensor may place the sum apart from out
      } else {
        out = (spec.beta == 1.0 ? out.add_(addf) : out.add_(addf, spec.beta)).to(spec.out_dtype);
      }
    }
    if (spec.linear) {
      std::vector<std::int64_t> sizes(a.sizes().begin(), a.sizes().end() - 1);
      sizes.push_back(n);
      // Not a view of the 2-D product (which nothing else holds): FSDP2 warns about a module output
      // that is a view, since an in-place op on it would skip its pre-backward hook.
      out = at::_unsafe_view(out, sizes);
    }

    ctx->save_for_backward({qa.data, qa.inv_scale, b8, qb.inv_scale});
    ctx->saved_data["linear"] = spec.linear;
    ctx->saved_data["alpha"] = spec.alpha;
    ctx->saved_data["beta"] = spec.beta;
    ctx->saved_data["a_sizes"] = a.sizes();
    ctx->saved_data["a_dtype"] = static_cast<std::int64_t>(a.scalar_type());
    ctx->saved_data["b_dtype"] = static_cast<std::int64_t>(b.scalar_type());
    ctx->saved_data["add"] = add.defined();
    if (add.defined()) {
      ctx->saved_data["add_sizes"] = add.sizes();
      ctx->saved_data["add_dtype"] = static_cast<std::int64_t>(add.scalar_type());
    }
    ctx->saved_data["backward_dtype"] = static_cast<std::int64_t>(spec.recipe.backward_dtype);
    ctx->saved_data["margin"] = spec.recipe.margin;
    ctx->saved_data["fused"] = spec.options.fused_kernels;
    ctx->saved_data["cuda_layout"] = spec.options.cuda_layout_everywhere;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& a8 = saved[0];
    const at::Tensor& inv_a = saved[1];
    const at::Tensor& b8 = saved[2];  // logical [K, N]
    const at::Tensor& inv_b = saved[3];
    const auto& d = ctx->saved_data;
    const bool linear = d.at("linear").toBool();
    const double alpha = d.at("alpha").toDouble();
    const double beta = d.at("beta").toDouble();
    Recipe recipe;
    recipe.backward_dtype = static_cast<c10::ScalarType>(d.at("backward_dtype").toInt());
    recipe.margin = d.at("margin").toInt();
    CallOptions options;
    options.fused_kernels = d.at("fused").toBool();
    options.cuda_layout_everywhere = d.at("cuda_layout").toBool();

    const at::Tensor& g = grads[0];
    const std::int64_t n = b8.size(1);
    const at::Tensor g2 = linear ? g.reshape({-1, n}) : g;
    const detail::Quantized qg = detail::quantize_gradient(g2, recipe, options);
    const at::Tensor inv_g = times(qg.inv_scale, alpha);

    at::Tensor grad_a;
    at::Tensor grad_b;
    at::Tensor grad_add;
    if (ctx->needs_input_grad(0)) {
      const auto a_dtype = static_cast<c10::ScalarType>(d.at("a_dtype").toInt());
      grad_a = scaled_gemm(qg.data, inv_g, b8.t(), inv_b, std::nullopt, a_dtype, false, options)
                   .view(d.at("a_sizes").toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      const auto b_dtype = static_cast<c10::ScalarType>(d.at("b_dtype").toInt());
      grad_b = linear ? scaled_gemm(qg.data.t(), inv_g, a8, inv_a, std::nullopt, b_dtype, false, options)
                      : scaled_gemm(a8.t(), inv_a, qg.data, inv_g, std::nullopt, b_dtype, false, options);
    }
    if (d.at("add").toBool() && ctx->needs_input_grad(2)) {
      grad_add = detail::addend_gradient(g2, beta, d.at("add_sizes").toIntVector(),
                                         static_cast<c10::ScalarType>(d.at("add_dtype").toInt()));
    }
    return {grad_a, grad_b, grad_add, at::Tensor()};
  }
};

at::Tensor run(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& add, const GemmSpec& spec,
               const Support& support, const char* who) {
  spec.recipe.validate();
  TORCH_CHECK(support.ok, who, ": this call cannot run in fp8 (", support.reason,
              "); check fp8_*_support() first and run it in the lower-precision dtype instead");
  if (is_rowwise(spec.recipe.granularity)) {
    const detail::RowwiseSpec rowwise{spec.linear,  spec.alpha,       spec.beta,         spec.recipe,
                                      spec.out_dtype, spec.options, will_need_grad(a), will_need_grad(b)};
    return detail::rowwise_gemm(a, b, add, rowwise);
  }
  return Fp8Gemm::apply(a, b, add, spec);
}

// The support rule's answer for a recipe: row-wise scales are refused for tensor subclasses met
// eagerly (DTensor), which run in the lower-precision dtype (Note [fp8 rowwise] in rowwise.cpp).
Support for_recipe(const Support& support, const Recipe& recipe, const std::vector<const at::Tensor*>& operands) {
  if (support.ok && is_rowwise(recipe.granularity) && any_eager_subclass(operands)) {
    return no("row-wise fp8 scales (granularity rowwise) are not implemented for tensor subclasses such as DTensor "
              "(tensor parallel): a row's amax would span shards");
  }
  return support;
}

const at::Tensor& bias_or_undefined(const std::optional<at::Tensor>& bias) {
  static const at::Tensor undefined;
  return bias.has_value() ? *bias : undefined;
}

double real_scalar(const c10::Scalar& s, const char* what) {
  TORCH_CHECK(!s.isComplex() && !s.isBoolean(), "autocastgen::fp8::fp8_addmm: ", what, " must be a real number");
  return s.toDouble();
}

}  // namespace

Support fp8_linear_support(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           c10::ScalarType out_dtype, Scaling scaling) {
  std::vector<const at::Tensor*> operands{&input, &weight};
  if (bias.has_value() && bias->defined()) operands.push_back(&*bias);
  if (const Support s = check_common(operands, out_dtype); !s) return s;
  if (weight.dim() != 2 || input.dim() < 1) return no("linear needs a 2-D weight and an input with at least 1 dimension");
  if (input.size(-1) != weight.size(1)) return no("the input's last dimension is not the weight's second");
  if (operands.size() == 3 && (bias->dim() != 1 || bias->size(0) != weight.size(0))) {
    return no("the bias is not a vector of the weight's first dimension");
  }
  const std::int64_t k = weight.size(1);
  const std::int64_t m = k == 0 ? 0 : input.numel() / k;
  if (const Support s = check_shape(m, k, weight.size(0), will_need_grad(weight)); !s) return s;
  if (any_eager_subclass(operands)) {
    return subclass_layout(input, weight, operands.size() == 3 ? bias : std::optional<at::Tensor>(), true, scaling);
  }
  return yes();
}

namespace {

Support mm_shape_support(const at::Tensor& self, const at::Tensor& mat2, c10::ScalarType out_dtype) {
  if (const Support s = check_common({&self, &mat2}, out_dtype); !s) return s;
  if (self.dim() != 2 || mat2.dim() != 2) return no("mm needs two 2-D matrices");
  if (self.size(1) != mat2.size(0)) return no("the matrices' inner dimensions differ");
  return check_shape(self.size(0), self.size(1), mat2.size(1), will_need_grad(mat2));
}

}  // namespace

Support fp8_mm_support(const at::Tensor& self, const at::Tensor& mat2, c10::ScalarType out_dtype, Scaling scaling) {
  if (const Support s = mm_shape_support(self, mat2, out_dtype); !s) return s;
  if (any_eager_subclass({&self, &mat2})) return subclass_layout(self, mat2, std::nullopt, false, scaling);
  return yes();
}

Support fp8_addmm_support(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                          c10::ScalarType out_dtype, Scaling scaling) {
  if (const Support s = mm_shape_support(mat1, mat2, out_dtype); !s) return s;
  if (const Support s = check_common({&mat1, &self}, out_dtype); !s) return s;
  if (!at::is_expandable_to(self.sizes(), {mat1.size(0), mat2.size(1)})) {
    return no("self does not broadcast to the product's shape");
  }
  if (any_eager_subclass({&self, &mat1, &mat2})) return subclass_layout(mat1, mat2, self, false, scaling);
  return yes();
}

namespace {

// Each GEMM given its support answer: fp8_* (which throws when unsupported) and try_fp8_* (which
// returns nullopt) ask the rule once.
at::Tensor linear_gemm(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       const Recipe& recipe, c10::ScalarType out_dtype, const CallOptions& options, const Support& support) {
  GemmSpec spec{true, 1.0, 1.0, recipe, out_dtype, options};
  const std::optional<at::Tensor> add = bias.has_value() && bias->defined() ? bias : std::nullopt;
  return run(input, weight, add, spec, support, "autocastgen::fp8::fp8_linear");
}

at::Tensor mm_gemm(const at::Tensor& self, const at::Tensor& mat2, const Recipe& recipe, c10::ScalarType out_dtype,
                   const CallOptions& options, const Support& support) {
  GemmSpec spec{false, 1.0, 1.0, recipe, out_dtype, options};
  return run(self, mat2, std::nullopt, spec, support, "autocastgen::fp8::fp8_mm");
}

at::Tensor addmm_gemm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
                      const c10::Scalar& alpha, const Recipe& recipe, c10::ScalarType out_dtype,
                      const CallOptions& options, const Support& support) {
  GemmSpec spec{false, real_scalar(alpha, "alpha"), real_scalar(beta, "beta"), recipe, out_dtype, options};
  return run(mat1, mat2, self, spec, support, "autocastgen::fp8::fp8_addmm");
}

}  // namespace

at::Tensor fp8_linear(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      const Recipe& recipe, c10::ScalarType out_dtype, const CallOptions& options) {
  return linear_gemm(input, weight, bias, recipe, out_dtype, options,
                     for_recipe(fp8_linear_support(input, weight, bias, out_dtype, recipe.scaling), recipe,
                                {&input, &weight, &bias_or_undefined(bias)}));
}

at::Tensor fp8_mm(const at::Tensor& self, const at::Tensor& mat2, const Recipe& recipe, c10::ScalarType out_dtype,
                  const CallOptions& options) {
  return mm_gemm(self, mat2, recipe, out_dtype, options,
                 for_recipe(fp8_mm_support(self, mat2, out_dtype, recipe.scaling), recipe, {&self, &mat2}));
}

at::Tensor fp8_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
                     const c10::Scalar& alpha, const Recipe& recipe, c10::ScalarType out_dtype,
                     const CallOptions& options) {
  return addmm_gemm(self, mat1, mat2, beta, alpha, recipe, out_dtype, options,
                    for_recipe(fp8_addmm_support(self, mat1, mat2, out_dtype, recipe.scaling), recipe,
                               {&self, &mat1, &mat2}));
}

std::optional<at::Tensor> try_fp8_linear(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, const Recipe& recipe,
                                         c10::ScalarType out_dtype, const CallOptions& options, Support* refused) {
  const Support support = for_recipe(fp8_linear_support(input, weight, bias, out_dtype, recipe.scaling), recipe,
                                     {&input, &weight, &bias_or_undefined(bias)});
  if (refused != nullptr) *refused = support;
  if (!support) return std::nullopt;
  return linear_gemm(input, weight, bias, recipe, out_dtype, options, support);
}

std::optional<at::Tensor> try_fp8_mm(const at::Tensor& self, const at::Tensor& mat2, const Recipe& recipe,
                                     c10::ScalarType out_dtype, const CallOptions& options, Support* refused) {
  const Support support =
      for_recipe(fp8_mm_support(self, mat2, out_dtype, recipe.scaling), recipe, {&self, &mat2});
  if (refused != nullptr) *refused = support;
  if (!support) return std::nullopt;
  return mm_gemm(self, mat2, recipe, out_dtype, options, support);
}

std::optional<at::Tensor> try_fp8_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                                        const c10::Scalar& beta, const c10::Scalar& alpha, const Recipe& recipe,
                                        c10::ScalarType out_dtype, const CallOptions& options, Support* refused) {
  const Support support = for_recipe(fp8_addmm_support(self, mat1, mat2, out_dtype, recipe.scaling), recipe,
                                     {&self, &mat1, &mat2});
  if (refused != nullptr) *refused = support;
  if (!support) return std::nullopt;
  return addmm_gemm(self, mat1, mat2, beta, alpha, recipe, out_dtype, options, support);
}

}  // namespace autocastgen::fp8
