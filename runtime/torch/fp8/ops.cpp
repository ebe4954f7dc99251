// The Python face of the fp8 library: torch.ops.autocastgen.fp8_* GEMMs, support rules and state
// (the quantisation ops are in primitive_ops.cpp).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "autocastgen/fp8/fp8.h"
#include "operand.h"
#include "bookkeeping_op.h"

namespace autocastgen::fp8 {
namespace {

Recipe recipe_of(const std::string& scaling, const std::string& forward, const std::string& backward,
                 int64_t amax_history_len, int64_t margin, const std::string& granularity) {
  Recipe r;
  const auto g = parse_granularity(granularity);
  TORCH_CHECK(g.has_value(), "autocastgen fp8: unknown granularity '", granularity,
              "' (tensorwise, rowwise or rowwise_with_gw_hp)");
  r.granularity = *g;
  const auto s = parse_scaling(scaling);
  TORCH_CHECK(s.has_value(), "autocastgen fp8: unknown scaling '", scaling, "' (current or delayed)");
  const auto f = parse_fp8_dtype(forward);
  TORCH_CHECK(f.has_value(), "autocastgen fp8: unknown fp8 dtype '", forward, "'");
  const auto b = parse_fp8_dtype(backward);
  TORCH_CHECK(b.has_value(), "autocastgen fp8: unknown fp8 dtype '", backward, "'");
  r.scaling = *s;
  r.forward_dtype = *f;
  r.backward_dtype = *b;
  r.amax_history_len = amax_history_len;
  r.margin = margin;
  return r;
}

CallOptions options_of(bool cache, bool fused, bool cuda_layout) {
  CallOptions o;
  o.cache_weights = cache;
  o.fused_kernels = fused;
  o.cuda_layout_everywhere = cuda_layout;
  return o;
}

c10::DeviceType device_type(const std::string& device) { return c10::Device(device).type(); }


}  // namespace
}  // namespace autocastgen::fp8

// The recipe and options as keyword arguments, shared by the three GEMM schemas.
#define AUTOCASTGEN_FP8_RECIPE_ARGS                                                                 \
  "str scaling=\"current\", str forward=\"float8_e4m3fn\", str backward=\"float8_e5m2\", " \
  "int amax_history_len=16, int margin=0, bool cache=True, bool fused=True, bool cuda_layout=False, " \
  "str granularity=\"tensorwise\""

TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  using namespace autocastgen::fp8;  // NOLINT
  m.def("fp8_linear(Tensor input, Tensor weight, Tensor? bias, *, ScalarType out_dtype, " AUTOCASTGEN_FP8_RECIPE_ARGS
        ") -> Tensor",
        [](const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
           c10::ScalarType out_dtype, const std::string& scaling, const std::string& forward,
           const std::string& backward, int64_t history, int64_t margin, bool cache, bool fused, bool cuda_layout,
           const std::string& granularity) {
          return fp8_linear(input, weight, bias, recipe_of(scaling, forward, backward, history, margin, granularity),
                            out_dtype, options_of(cache, fused, cuda_layout));
        });
  m.def("fp8_mm(Tensor self, Tensor mat2, *, ScalarType out_dtype, " AUTOCASTGEN_FP8_RECIPE_ARGS ") -> Tensor",
        [](const at::Tensor& self, const at::Tensor& mat2, c10::ScalarType out_dtype, const std::string& scaling,
           const std::string& forward, const std::string& backward, int64_t history, int64_t margin, bool cache,
           bool fused, bool cuda_layout, const std::string& granularity) {
          return fp8_mm(self, mat2, recipe_of(scaling, forward, backward, history, margin, granularity), out_dtype,
                        options_of(cache, fused, cuda_layout));
        });
  m.def("fp8_addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, ScalarType out_dtype, "
        AUTOCASTGEN_FP8_RECIPE_ARGS ") -> Tensor",
        [](const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const c10::Scalar& beta,
           const c10::Scalar& alpha, c10::ScalarType out_dtype, const std::string& scaling, const std::string& forward,
           const std::string& backward, int64_t history, int64_t margin, bool cache, bool fused, bool cuda_layout,
           const std::string& granularity) {
          return fp8_addmm(self, mat1, mat2, beta, alpha,
                           recipe_of(scaling, forward, backward, history, margin, granularity), out_dtype,
                           options_of(cache, fused, cuda_layout));
        });
  // "" when the call can run in fp8, else the reason it cannot.
  m.def("fp8_linear_support(Tensor input, Tensor weight, Tensor? bias, ScalarType out_dtype) -> str",
        [](const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
           c10::ScalarType out_dtype) { return std::string(fp8_linear_support(input, weight, bias, out_dtype).reason); });
  m.def("fp8_mm_support(Tensor self, Tensor mat2, ScalarType out_dtype) -> str",
        [](const at::Tensor& self, const at::Tensor& mat2, c10::ScalarType out_dtype) {
          return std::string(fp8_mm_support(self, mat2, out_dtype).reason);
        });
  m.def("fp8_addmm_support(Tensor self, Tensor mat1, Tensor mat2, ScalarType out_dtype) -> str",
        [](const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, c10::ScalarType out_dtype) {
          return std::string(fp8_addmm_support(self, mat1, mat2, out_dtype).reason);
        });
  // "" when the operands' layout lets the GEMM run in fp8 on each rank's shards, else why not
  // (Note [fp8 under tensor parallel] in gemm.cpp). A plain tensor is its own layout: always "".
  // DTensor answers through its op handler (autocastgen.distributed); the support rules above ask
  // it for operands that are tensor subclasses.
  m.def("fp8_layout_support(Tensor a, Tensor b, Tensor? add, bool linear, str scaling=\"current\") -> str");
  // [quantizations, hits, entries] of this thread's weight cache.
  m.def("fp8_weight_cache_stats(str device=\"cpu\") -> int[]", bookkeeping([](const std::string& device) {
    const CacheStats s = weight_cache_stats(device_type(device));
    return std::vector<int64_t>{static_cast<int64_t>(s.quantizations), static_cast<int64_t>(s.hits),
                                static_cast<int64_t>(s.entries)};
  }));
  m.def("fp8_clear_weight_cache(str device=\"cpu\") -> ()",
        bookkeeping([](const std::string& device) { clear_weight_cache(device_type(device)); }));
  m.def("fp8_reset_weight_cache_stats(str device=\"cpu\") -> ()",
        bookkeeping([](const std::string& device) { reset_weight_cache_stats(device_type(device)); }));
  // (amax history most recent first, next scale, casts); an empty history and 0 casts when none.
  m.def("fp8_delayed_scaling_state(Tensor weight) -> (float[], float, int)", [](const at::Tensor& weight) {
    TORCH_CHECK(!autocastgen::fp8::detail::dataless(weight), "fp8_delayed_scaling_state reads a weight's recorded amaxes and cannot run ",
                "on fake tensors (torch.compile): call it outside the compiled function");
    const auto snap = delayed_scaling_state(weight);
    if (!snap) return std::make_tuple(std::vector<double>{}, 1.0, int64_t{0});
    return std::make_tuple(std::vector<double>(snap->amax_history.begin(), snap->amax_history.end()),
                           static_cast<double>(snap->scale), snap->casts);
  });
  // Note [fp8 in an exported program]: on while autocastgen.export traces; returns the previous value.
  m.def("fp8_exporting_program(bool on) -> bool", bookkeeping([](bool on) {
          return autocastgen::fp8::detail::set_exporting_program(on);
        }));
  m.def("fp8_reset_delayed_scaling_state() -> ()", bookkeeping([] { reset_delayed_scaling_state(); }));
  m.def("fp8_delayed_scaling_state_size() -> int",
        bookkeeping([] { return static_cast<int64_t>(delayed_scaling_state_size()); }));
}

namespace autocastgen::fp8 {
namespace {

// Plain tensors (the device kernel) and fake ones (the Meta kernel) have no layout to refuse; the
// scaling name is checked so that a bad call fails alike everywhere.
std::string plain_layout_support(const at::Tensor& /*a*/, const at::Tensor& /*b*/,
                                 const std::optional<at::Tensor>& /*add*/, bool /*linear*/, c10::string_view scaling) {
  TORCH_CHECK(parse_scaling(std::string(scaling)).has_value(), "fp8_layout_support: unknown scaling '", scaling,
              "' (current or delayed)");
  return "";
}

}  // namespace
}  // namespace autocastgen::fp8

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  m.impl("fp8_layout_support", TORCH_FN(autocastgen::fp8::plain_layout_support));
}

TORCH_LIBRARY_IMPL(autocastgen, Meta, m) {
  m.impl("fp8_layout_support", TORCH_FN(autocastgen::fp8::plain_layout_support));
}

TORCH_LIBRARY_IMPL(autocastgen, Autograd, m) {
  m.impl("fp8_layout_support",
         torch::CppFunction::makeFromBoxedFunction<&autocastgen::fp8::detail::below_autograd>());
}
