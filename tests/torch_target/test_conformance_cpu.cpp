// Conformance: every op of the shipped cpu policy gives bitwise the results of PyTorch's own AutocastCPU kernels.
//
// How: the global environment first runs every (op, lower-precision dtype) case under PyTorch's own
// CPU autocast and records the outputs; then it dlopens libautocastgen_torch_cpu.so, whose
// generated AutocastCPU kernels replace PyTorch's; each parameterized case then runs the same
// inputs again and demands identical dtypes, sizes, strides and bytes for every output, and that
// wrapper_trace() saw exactly our wrapper for that op run once.
//
// Built twice: against the torch-state library (driven by PyTorch's autocast state) and, with
// AUTOCASTGEN_OWN_STATE, against the library generated with --state autocastgen, driven by
// autocastgen::AutocastScope. The baselines always come from PyTorch's own kernels.
//
// Inputs come from the op's schema: Tensor arguments get random tensors (fixed seed per op),
// other arguments their schema default; a small table of per-family recipes gives shapes and the
// values that have no default. Floating inputs are float32 for lower_precision_fp ops, the
// lower-precision dtype for fp32 (and other casting-to-fp32) ops, and alternate between the two
// for promote ops, so that autocast must cast in every case.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>

#ifndef AUTOCASTGEN_CPU_LIBRARY
#error "AUTOCASTGEN_CPU_LIBRARY (path of libautocastgen_torch_cpu.so) must be defined"
#endif
#ifndef AUTOCASTGEN_CPU_MANIFEST
#error "AUTOCASTGEN_CPU_MANIFEST (path of autocast_cpu.manifest.json) must be defined"
#endif

namespace {

// ------------------------------------------------------------------------------------------------
// Input recipes
// ------------------------------------------------------------------------------------------------

enum class Fill {
  Normal,       // standard normal
  Positive,     // uniform in (0.5, 1.5)
  Probability,  // uniform in (0.1, 0.9)
  Spd,          // symmetric positive definite n x n (shape[0] = n), then viewed as `view`
  Tril,         // well-conditioned lower triangular n x n
  Integers,     // exactly `values`, integer dtype
};

struct TensorSpec {
  Fill fill = Fill::Normal;
  std::vector<int64_t> shape;
  std::vector<int64_t> values = {};  // Integers: the contents, row-major
  at::ScalarType int_dtype = at::kLong;
  std::vector<int64_t> view = {};  // Spd: reshape to this
};

TensorSpec randn(std::vector<int64_t> shape) { return {Fill::Normal, std::move(shape)}; }
TensorSpec positive(std::vector<int64_t> shape) { return {Fill::Positive, std::move(shape)}; }
TensorSpec probability(std::vector<int64_t> shape) { return {Fill::Probability, std::move(shape)}; }
TensorSpec spd(int64_t n, std::vector<int64_t> view = {}) { return {Fill::Spd, {n, n}, {}, at::kLong, std::move(view)}; }
TensorSpec tril(int64_t n) { return {Fill::Tril, {n, n}}; }
TensorSpec longs(std::vector<int64_t> shape, std::vector<int64_t> values, at::ScalarType dtype = at::kLong) {
  return {Fill::Integers, std::move(shape), std::move(values), dtype, {}};
}

// One argument: a tensor, a tensor list, or a plain value.
struct ArgSpec {
  std::variant<TensorSpec, std::vector<TensorSpec>, c10::IValue> value;
  ArgSpec(TensorSpec t) : value(std::move(t)) {}                // NOLINT(google-explicit-constructor)
  ArgSpec(std::vector<TensorSpec> ts) : value(std::move(ts)) {}  // NOLINT(google-explicit-constructor)
  ArgSpec(c10::IValue v) : value(std::move(v)) {}               // NOLINT(google-explicit-constructor)
};

c10::IValue ints(std::vector<int64_t> v) { return c10::IValue(std::move(v)); }
c10::IValue str(const char* s) { return c10::IValue(std::string(s)); }
c10::IValue integer(int64_t v) { return c10::IValue(v); }
c10::IValue real(double v) { return c10::IValue(v); }
c10::IValue boolean(bool v) { return c10::IValue(v); }

// Arguments by schema name; Tensor arguments not named get `shape`; Tensor? arguments not named
// are None; other arguments not named take the schema default.
struct Recipe {
  std::map<std::string, ArgSpec> args;
  std::vector<int64_t> shape = {4, 4};
};

// ---- families
Recipe conv(int nd, bool same_padding = false) {
  std::vector<int64_t> input = {1, 2}, weight = {3, 2};
  for (int i = 0; i < nd; ++i) {
    input.push_back(6);
    weight.push_back(3);
  }
  Recipe r{{{"input", randn(input)}, {"weight", randn(weight)}, {"bias", randn({3})}}};
  if (same_padding) r.args.emplace("padding", str("same"));
  return r;
}

Recipe conv_transpose(int nd) {
  std::vector<int64_t> input = {1, 2}, weight = {2, 3};
  for (int i = 0; i < nd; ++i) {
    input.push_back(5);
    weight.push_back(3);
  }
  return {{{"input", randn(input)}, {"weight", randn(weight)}, {"bias", randn({3})}}};
}

Recipe shaped(std::vector<int64_t> shape) { return {{}, std::move(shape)}; }

Recipe grid_sampler(int nd) {
  if (nd == 2) {
    return {{{"input", randn({1, 1, 4, 4})}, {"grid", randn({1, 3, 3, 2})}, {"interpolation_mode", integer(0)},
             {"padding_mode", integer(0)}, {"align_corners", boolean(false)}}};
  }
  return {{{"input", randn({1, 1, 4, 4, 4})}, {"grid", randn({1, 2, 2, 2, 3})}, {"interpolation_mode", integer(0)},
           {"padding_mode", integer(0)}, {"align_corners", boolean(false)}}};
}

Recipe classification(const char* input_name) {  // (N=3, C=5) scores and class targets
  return {{{input_name, randn({3, 5})}, {"target", longs({3}, {0, 4, 2})}, {"weight", positive({5})}}};
}

Recipe ctc_loss(bool tensor_lengths) {
  Recipe r{{{"log_probs", randn({10, 2, 5})}, {"targets", longs({2, 3}, {1, 2, 3, 2, 3, 4})}}};
  if (tensor_lengths) {
    r.args.emplace("input_lengths", longs({2}, {10, 10}));
    r.args.emplace("target_lengths", longs({2}, {3, 3}));
  } else {
    r.args.emplace("input_lengths", ints({10, 10}));
    r.args.emplace("target_lengths", ints({3, 3}));
  }
  return r;
}

Recipe multilabel_margin(bool forward) {
  Recipe r{{{"self", randn({3, 4})}, {"target", longs({3, 4}, {0, 1, -1, -1, 2, -1, -1, -1, 3, 0, 1, -1})}}};
  if (forward) r.args.emplace("reduction", integer(1));
  return r;
}

Recipe stft(bool center) {
  Recipe r{{{"self", randn({32})}, {"n_fft", integer(8)}, {"window", positive({8})}, {"return_complex", boolean(true)}}};
  if (center) r.args.emplace("center", boolean(true));
  return r;
}

Recipe one(const char* name, TensorSpec t) { return {{{name, std::move(t)}}}; }

// Per-op recipes; an op not listed runs with the default recipe (4x4 tensors, schema defaults).
const std::map<std::string, Recipe>& recipes() {
  static const std::map<std::string, Recipe> table = {
      // ---- convolutions
      {"conv1d", conv(1)},
      {"conv2d", conv(2)},
      {"conv3d", conv(3)},
      {"conv1d.padding", conv(1, true)},
      {"conv2d.padding", conv(2, true)},
      {"conv3d.padding", conv(3, true)},
      {"conv_transpose1d", conv_transpose(1)},
      {"conv_transpose2d.input", conv_transpose(2)},
      {"conv_transpose3d.input", conv_transpose(3)},
      {"_convolution.deprecated",
       {{{"input", randn({1, 2, 6, 6})}, {"weight", randn({3, 2, 3, 3})}, {"bias", randn({3})}, {"stride", ints({1, 1})},
         {"padding", ints({0, 0})}, {"dilation", ints({1, 1})}, {"transposed", boolean(false)},
         {"output_padding", ints({0, 0})}, {"groups", integer(1)}, {"benchmark", boolean(false)},
         {"deterministic", boolean(false)}, {"cudnn_enabled", boolean(true)}}}},
      {"conv_tbc", {{{"self", randn({10, 7, 3})}, {"weight", randn({5, 3, 5})}, {"bias", randn({5})}}}},
      // ---- matrix products
      {"mm", {{{"self", randn({3, 4})}, {"mat2", randn({4, 5})}}}},
      {"bmm", {{{"self", randn({2, 3, 4})}, {"mat2", randn({2, 4, 5})}}}},
      {"addmm", {{{"self", randn({3, 5})}, {"mat1", randn({3, 4})}, {"mat2", randn({4, 5})}}}},
      {"_addmm_activation",
       {{{"self", randn({3, 5})}, {"mat1", randn({3, 4})}, {"mat2", randn({4, 5})}, {"use_gelu", boolean(true)}}}},
      {"addbmm", {{{"self", randn({3, 5})}, {"batch1", randn({2, 3, 4})}, {"batch2", randn({2, 4, 5})}}}},
      {"baddbmm", {{{"self", randn({2, 3, 5})}, {"batch1", randn({2, 3, 4})}, {"batch2", randn({2, 4, 5})}}}},
      {"linear", {{{"input", randn({2, 4})}, {"weight", randn({3, 4})}, {"bias", randn({3})}}}},
      {"matmul", {{{"self", randn({2, 3, 4})}, {"other", randn({4, 5})}}}},
      {"prelu", {{{"self", randn({2, 3, 4})}, {"weight", randn({3})}}}},
      // ---- recurrent layer: one LSTM layer (mode 2), seq 3, batch 2, input 4, hidden 5
      {"mkldnn_rnn_layer",
       {{{"input", randn({3, 2, 4})}, {"weight0", randn({20, 4})}, {"weight1", randn({20, 5})}, {"weight2", randn({20})},
         {"weight3", randn({20})}, {"hx_", randn({2, 5})}, {"cx_", randn({2, 5})}, {"reverse", boolean(false)},
         {"batch_sizes", ints({})}, {"mode", integer(2)}, {"hidden_size", integer(5)}, {"num_layers", integer(1)},
         {"has_biases", boolean(true)}, {"bidirectional", boolean(false)}, {"batch_first", boolean(false)},
         {"train", boolean(false)}}}},
      // ---- attention
      {"scaled_dot_product_attention",
       {{{"query", randn({1, 2, 4, 8})}, {"key", randn({1, 2, 4, 8})}, {"value", randn({1, 2, 4, 8})},
         {"attn_mask", randn({4, 4})}}}},
      {"_native_multi_head_attention",
       {{{"query", randn({2, 3, 4})}, {"key", randn({2, 3, 4})}, {"value", randn({2, 3, 4})}, {"embed_dim", integer(4)},
         {"num_head", integer(2)}, {"qkv_weight", randn({12, 4})}, {"qkv_bias", randn({12})},
         {"proj_weight", randn({4, 4})}, {"proj_bias", randn({4})}}}},
      // ---- pooling, padding, sampling
      {"avg_pool3d", {{{"self", randn({1, 1, 4, 4, 4})}, {"kernel_size", ints({2, 2, 2})}}}},
      {"max_pool3d", {{{"self", randn({1, 1, 4, 4, 4})}, {"kernel_size", ints({2, 2, 2})}}}},
      {"adaptive_avg_pool3d", {{{"self", randn({1, 2, 4, 4, 4})}, {"output_size", ints({2, 2, 2})}}}},
      {"adaptive_max_pool3d", {{{"self", randn({1, 2, 4, 4, 4})}, {"output_size", ints({2, 2, 2})}}}},
      {"fractional_max_pool2d",
       {{{"self", randn({1, 1, 8, 8})}, {"kernel_size", ints({2, 2})}, {"output_size", ints({4, 4})},
         {"random_samples", probability({1, 1, 2})}}}},
      {"fractional_max_pool3d",
       {{{"self", randn({1, 1, 8, 8, 8})}, {"kernel_size", ints({2, 2, 2})}, {"output_size", ints({4, 4, 4})},
         {"random_samples", probability({1, 1, 3})}}}},
      {"max_unpool2d",
       {{{"self", randn({1, 1, 2, 2})}, {"indices", longs({1, 1, 2, 2}, {0, 2, 8, 10})}, {"output_size", ints({4, 4})}}}},
      {"max_unpool3d",
       {{{"self", randn({1, 1, 2, 2, 2})}, {"indices", longs({1, 1, 2, 2, 2}, {0, 2, 8, 10, 32, 34, 40, 42})},
         {"output_size", ints({4, 4, 4})}, {"stride", ints({2, 2, 2})}, {"padding", ints({0, 0, 0})}}}},
      {"reflection_pad1d", {{{"self", randn({1, 2, 5})}, {"padding", ints({2, 2})}}}},
      {"reflection_pad2d", {{{"self", randn({1, 1, 5, 5})}, {"padding", ints({1, 1, 1, 1})}}}},
      {"replication_pad1d", {{{"self", randn({1, 2, 5})}, {"padding", ints({2, 2})}}}},
      {"replication_pad2d", {{{"self", randn({1, 1, 5, 5})}, {"padding", ints({1, 1, 1, 1})}}}},
      {"replication_pad3d", {{{"self", randn({1, 1, 3, 3, 3})}, {"padding", ints({1, 1, 1, 1, 1, 1})}}}},
      {"grid_sampler", grid_sampler(2)},
      {"grid_sampler_2d", grid_sampler(2)},
      {"_grid_sampler_2d_cpu_fallback", grid_sampler(2)},
      {"grid_sampler_3d", grid_sampler(3)},
      // ---- reductions, statistics, complex views
      {"prod.dim_int", {{{"dim", integer(1)}}}},
      {"quantile", {{{"self", randn({8})}, {"q", probability({2})}}}},
      {"quantile.scalar", {{{"self", randn({8})}, {"q", real(0.5)}}}},
      {"nanquantile", {{{"self", randn({8})}, {"q", probability({2})}}}},
      {"nanquantile.scalar", {{{"self", randn({8})}, {"q", real(0.5)}}}},
      {"cdist", {{{"x1", randn({3, 4})}, {"x2", randn({5, 4})}}}},
      {"polar", one("abs", positive({4}))},
      {"view_as_complex", shaped({4, 2})},
      {"fake_quantize_per_tensor_affine",
       {{{"scale", real(0.1)}, {"zero_point", integer(0)}, {"quant_min", integer(0)}, {"quant_max", integer(255)}}}},
      // ---- losses
      {"binary_cross_entropy", {{{"self", probability({4, 4})}, {"target", probability({4, 4})}, {"weight", positive({4})}}}},
      {"binary_cross_entropy_with_logits", {{{"target", probability({4, 4})}, {"pos_weight", positive({4})}}}},
      {"cosine_embedding_loss",
       {{{"input1", randn({3, 4})}, {"input2", randn({3, 4})}, {"target", longs({3}, {1, -1, 1})}}}},
      {"nll_loss", classification("self")},
      {"cross_entropy_loss", classification("self")},
      {"multi_margin_loss", {{{"self", randn({3, 4})}, {"target", longs({3}, {0, 1, 3})}, {"weight", positive({4})}}}},
      {"nll_loss2d",
       {{{"self", randn({2, 3, 2, 2})}, {"target", longs({2, 2, 2}, {0, 1, 2, 0, 2, 1, 0, 0})}, {"weight", positive({3})}}}},
      {"hinge_embedding_loss", {{{"self", randn({4})}, {"target", longs({4}, {1, -1, 1, -1})}}}},
      {"poisson_nll_loss",
       {{{"target", positive({4, 4})}, {"log_input", boolean(true)}, {"full", boolean(false)}, {"eps", real(1e-8)},
         {"reduction", integer(1)}}}},
      {"kl_div", one("target", probability({4, 4}))},
      {"margin_ranking_loss", shaped({4})},
      {"multilabel_margin_loss", multilabel_margin(false)},
      {"multilabel_margin_loss_forward", multilabel_margin(true)},
      {"ctc_loss.IntList", ctc_loss(false)},
      {"ctc_loss.Tensor", ctc_loss(true)},
      // ---- spectral (the fft_* ops run on the default 4x4 input)
      {"stft", stft(false)},
      {"stft.center", stft(true)},
      // ---- linear algebra
      {"inverse", one("self", spd(4))},
      {"linalg_inv", one("A", spd(4))},
      {"linalg_inv_ex", one("A", spd(4))},
      {"linalg_cholesky", one("self", spd(4))},
      {"cholesky", one("self", spd(4))},  // in cpu.yaml until 2.14
      {"linalg_cholesky_ex", one("self", spd(4))},
      {"linalg_eigh", one("self", spd(4))},
      {"linalg_eigvalsh", one("self", spd(4))},
      {"linalg_matrix_sqrth", one("self", spd(4))},
      {"_lu_with_info", one("self", spd(4))},
      {"linalg_cond", one("self", spd(4))},
      {"linalg_cond.p_str", {{{"self", spd(4)}, {"p", str("fro")}}}},
      {"linalg_matrix_rank", {{{"tol", real(1e-5)}}}},
      {"linalg_matrix_rank.tol_tensor", one("tol", positive({}))},
      {"linalg_matrix_rank.atol_rtol_tensor", {{{"atol", positive({})}, {"rtol", positive({})}}}},
      {"linalg_solve", {{{"A", spd(4)}, {"B", randn({4, 2})}}}},
      {"linalg_lstsq", {{{"self", randn({5, 3})}, {"b", randn({5, 2})}}}},
      {"linalg_svd", shaped({4, 3})},
      {"linalg_svdvals", shaped({4, 3})},
      {"svd", shaped({4, 3})},
      {"linalg_qr", shaped({4, 3})},
      {"geqrf", shaped({4, 3})},
      {"pinverse", shaped({4, 3})},
      {"linalg_householder_product", {{{"input", randn({4, 3})}, {"tau", randn({3})}}}},
      {"orgqr", {{{"self", randn({4, 3})}, {"input2", randn({3})}}}},
      {"ormqr", {{{"self", randn({4, 3})}, {"input2", randn({3})}, {"input3", randn({4, 2})}}}},
      {"linalg_tensorinv", {{{"self", spd(4, {4, 2, 2})}, {"ind", integer(1)}}}},
      {"linalg_tensorsolve", {{{"self", spd(6, {2, 3, 6})}, {"other", randn({2, 3})}}}},
      {"cholesky_inverse", one("self", tril(4))},
      {"cholesky_solve", {{{"self", randn({4, 2})}, {"input2", tril(4)}}}},
      {"lu_solve", {{{"self", randn({4, 2})}, {"LU_data", spd(4)}, {"LU_pivots", longs({4}, {1, 2, 3, 4}, at::kInt)}}}},
      {"triangular_solve", {{{"self", randn({4, 2})}, {"A", tril(4)}, {"upper", boolean(false)}}}},
      // ---- promote: the list's tensors alternate between the lower-precision dtype and float32
      {"cat", {{{"tensors", std::vector<TensorSpec>{randn({2, 3}), randn({2, 3}), randn({1, 3})}}}}},
      {"stack", {{{"tensors", std::vector<TensorSpec>{randn({2, 3}), randn({2, 3})}}}}},
      {"index_copy",
       {{{"self", randn({5, 3})}, {"dim", integer(0)}, {"index", longs({3}, {0, 2, 4})}, {"source", randn({3, 3})}}}},
  };
  return table;
}

// Cases that are not run, keyed by op ("name" or "name.overload") or "op/dtype", with the reason.
// Keep it short; every entry must name an op of the manifest (of the releases that have the op).
const std::map<std::string, std::string>& not_covered() {
  static const std::string named = "named-tensor overload (releases before 2.13): its Dimname argument needs a named "
                                   "tensor, which autocast's casts drop; the unnamed overload of the op is covered";
  static const std::map<std::string, std::string> table = {
      {"prod.dim_Dimname", named},
      {"index_copy.dimname", named},
  };
  return table;
}

// Cases where PyTorch's own kernel may throw on some machines, keyed "op/dtype", with the reason.
// Where it throws, ours must throw the same message; where it does not, outputs are compared.
const std::map<std::string, std::string>& may_throw() {
  static const std::map<std::string, std::string> table = {
      {"mkldnn_rnn_layer/float16",
       "oneDNN has no float16 LSTM primitive on CPUs without native float16 support (\"could not create a "
       "primitive descriptor for the LSTM forward propagation primitive\")"},
      {"mkldnn_rnn_layer/bfloat16",
       "oneDNN has no bfloat16 LSTM primitive on CPUs without AVX-512 (seen on AMD EPYC with AVX2 only: the "
       "same message)"},
  };
  return table;
}

// Outputs whose bytes are unspecified, even between two calls of PyTorch's own kernel: they are
// compared by dtype, sizes and strides only. Keyed by op, then output index, with the reason.
const std::map<std::string, std::map<size_t, std::string>>& unspecified_outputs() {
  static const std::map<std::string, std::map<size_t, std::string>> table = {
      {"linalg_lstsq",
       {{0, "the solution from LAPACK's driver on PyTorch's threads: not bitwise reproducible from call to "
            "call on a loaded 2-core machine (torch 2.11: 3 of 6 elements differed in the last bit while "
            "the irreproducibility probe's own calls agreed)"}}},
      {"mkldnn_rnn_layer",
       {{3, "the oneDNN workspace: allocated with at::empty and only partly written, so its other bytes are "
            "whatever the allocator returned (filling freed memory with a pattern before the call makes "
            "the pattern appear in it)"}}},
  };
  return table;
}

// ------------------------------------------------------------------------------------------------
// Output comparison
// ------------------------------------------------------------------------------------------------

std::string describe(const c10::IValue& v) {
  std::ostringstream out;
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return "undefined tensor";
    out << "tensor(" << t.scalar_type() << ", sizes " << t.sizes() << ", strides " << t.strides() << ")";
  } else {
    out << v.tagKind() << " " << v;
  }
  return out.str();
}

// Bitwise: same dtype, sizes, strides and bytes (so NaNs match NaNs in the same places, and -0.0
// differs from 0.0). Returns a description of the first difference, or nothing.
std::optional<std::string> tensor_difference(const at::Tensor& expected, const at::Tensor& actual,
                                             bool compare_bytes = true) {
  if (expected.defined() != actual.defined()) {
    return "defined: expected " + std::to_string(expected.defined()) + ", got " + std::to_string(actual.defined());
  }
  if (!expected.defined()) return std::nullopt;
  std::ostringstream out;
  if (expected.scalar_type() != actual.scalar_type()) {
    out << "dtype: expected " << expected.scalar_type() << ", got " << actual.scalar_type();
    return out.str();
  }
  if (expected.layout() != actual.layout() || expected.device() != actual.device()) {
    out << "layout/device: expected " << expected.layout() << "/" << expected.device() << ", got " << actual.layout()
        << "/" << actual.device();
    return out.str();
  }
  if (expected.sizes() != actual.sizes()) {
    out << "sizes: expected " << expected.sizes() << ", got " << actual.sizes();
    return out.str();
  }
  if (expected.strides() != actual.strides()) {
    out << "strides: expected " << expected.strides() << ", got " << actual.strides();
    return out.str();
  }
  if (!compare_bytes) return std::nullopt;
  const at::Tensor e = expected.resolve_conj().resolve_neg().contiguous();
  const at::Tensor a = actual.resolve_conj().resolve_neg().contiguous();
  const auto* eb = static_cast<const unsigned char*>(e.const_data_ptr());
  const auto* ab = static_cast<const unsigned char*>(a.const_data_ptr());
  const size_t item = e.element_size();
  const size_t bytes = e.numel() * item;
  if (bytes == 0 || std::memcmp(eb, ab, bytes) == 0) return std::nullopt;
  size_t first = 0;
  while (first < bytes && eb[first] == ab[first]) ++first;
  const int64_t index = static_cast<int64_t>(first / item);
  const int64_t differing = at::ne(e.view({-1}).view(at::kByte).view({e.numel(), static_cast<int64_t>(item)}),
                                   a.view({-1}).view(at::kByte).view({a.numel(), static_cast<int64_t>(item)}))
                                .any(1)
                                .sum()
                                .item<int64_t>();
  out << differing << " of " << e.numel() << " elements differ bitwise; first at flat index " << index << ": expected "
      << e.view({-1})[index].item() << ", got " << a.view({-1})[index].item();
  return out.str();
}

std::optional<std::string> first_difference(const c10::IValue& expected, const c10::IValue& actual,
                                            const std::string& path) {
  auto at_path = [&](const std::string& what) { return path + ": " + what; };
  if (expected.isTensor() || actual.isTensor()) {
    if (!expected.isTensor() || !actual.isTensor()) {
      return at_path("expected " + describe(expected) + ", got " + describe(actual));
    }
    if (auto diff = tensor_difference(expected.toTensor(), actual.toTensor())) return at_path(*diff);
    return std::nullopt;
  }
  auto compare_sequences = [&](const std::vector<c10::IValue>& e,
                               const std::vector<c10::IValue>& a) -> std::optional<std::string> {
    if (e.size() != a.size()) {
      return at_path("length: expected " + std::to_string(e.size()) + ", got " + std::to_string(a.size()));
    }
    for (size_t i = 0; i < e.size(); ++i) {
      if (auto diff = first_difference(e[i], a[i], path + "[" + std::to_string(i) + "]")) return diff;
    }
    return std::nullopt;
  };
  if (expected.tagKind() != actual.tagKind()) {
    return at_path("expected " + describe(expected) + ", got " + describe(actual));
  }
  if (expected.isTuple()) {
    const auto& e = expected.toTupleRef().elements();
    const auto& a = actual.toTupleRef().elements();
    return compare_sequences(std::vector<c10::IValue>(e.begin(), e.end()), std::vector<c10::IValue>(a.begin(), a.end()));
  }
  if (expected.isList()) return compare_sequences(expected.toListRef().vec(), actual.toListRef().vec());
  if (expected.isDouble()) {
    const double e = expected.toDouble(), a = actual.toDouble();
    if (std::memcmp(&e, &a, sizeof e) != 0) return at_path("expected " + describe(expected) + ", got " + describe(actual));
    return std::nullopt;
  }
  if (expected.isNone() || expected.isInt() || expected.isBool() || expected.isString()) {
    if (!(expected == actual)) return at_path("expected " + describe(expected) + ", got " + describe(actual));
    return std::nullopt;
  }
  return at_path("cannot compare " + describe(expected));
}

// `metadata_only`: indices of outputs (tensors) whose bytes are not compared.
std::optional<std::string> outputs_difference(const std::vector<c10::IValue>& expected,
                                              const std::vector<c10::IValue>& actual,
                                              const std::set<size_t>& metadata_only = {}) {
  if (expected.size() != actual.size()) {
    return "number of outputs: expected " + std::to_string(expected.size()) + ", got " + std::to_string(actual.size());
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (metadata_only.count(i) != 0) {
      if (!expected[i].isTensor() || !actual[i].isTensor()) {
        return "output " + std::to_string(i) + ": expected two tensors, got " + describe(expected[i]) + " and " +
               describe(actual[i]);
      }
      if (auto diff = tensor_difference(expected[i].toTensor(), actual[i].toTensor(), false)) {
        return "output " + std::to_string(i) + ": " + *diff;
      }
      continue;
    }
    if (auto diff = first_difference(expected[i], actual[i], "output " + std::to_string(i))) return diff;
  }
  return std::nullopt;
}

// ------------------------------------------------------------------------------------------------
// Cases: every manifest op x every lower-precision dtype of the policy
// ------------------------------------------------------------------------------------------------

struct Case {
  std::string op;       // manifest key: "conv2d", "conv_transpose2d.input"
  std::string policy;   // lower_precision_fp, fp32, promote, ...
  std::string dtype;    // the policy's lower-precision dtype name: bfloat16, float16
  std::string test_name;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.op << " (" << c.policy << ", " << c.dtype << ")"; }

struct Manifest {
  std::string error;  // non-empty when it could not be read
  std::vector<nlohmann::json> ops;
  std::vector<std::string> lower_precision;
  std::string dispatch_key;
  std::vector<Case> cases;
  std::vector<std::string> skipped;  // "op/dtype: reason"
};

const std::set<std::string> kRunnablePolicies = {"lower_precision_fp", "fp32", "fp32_set_opt_dtype",
                                                 "fp32_append_dtype", "promote"};

std::string short_dtype(const std::string& dtype) {
  if (dtype == "bfloat16") return "bf16";
  if (dtype == "float16") return "fp16";
  return dtype;
}

const Manifest& manifest() {
  static const Manifest m = [] {
    Manifest m;
    try {
      std::ifstream in(AUTOCASTGEN_CPU_MANIFEST);
      if (!in) throw std::runtime_error("cannot open " + std::string(AUTOCASTGEN_CPU_MANIFEST));
      const nlohmann::json j = nlohmann::json::parse(in);
      m.dispatch_key = j.at("dispatch_key").get<std::string>();
      m.lower_precision = j.at("lower_precision").get<std::vector<std::string>>();
      for (const auto& op : j.at("ops")) m.ops.push_back(op);
      std::set<std::string> names;
      for (const auto& op : m.ops) {
        const std::string key = op.at("op").get<std::string>();
        for (const std::string& dtype : m.lower_precision) {
          const auto whole = not_covered().find(key);
          const auto one = not_covered().find(key + "/" + dtype);
          if (whole != not_covered().end() || one != not_covered().end()) {
            m.skipped.push_back(key + "/" + dtype + ": " + (whole != not_covered().end() ? whole : one)->second);
            continue;
          }
          std::string name = key + "_" + short_dtype(dtype);
          for (char& c : name) {
            if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
          }
          if (!names.insert(name).second) throw std::runtime_error("two cases named " + name);
          m.cases.push_back({key, op.at("policy").get<std::string>(), dtype, name});
        }
      }
    } catch (const std::exception& e) {
      m.error = e.what();
      m.cases.clear();
    }
    return m;
  }();
  return m;
}

at::ScalarType dtype_named(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  throw std::runtime_error("unknown dtype " + name);
}

const c10::OperatorHandle& find_op(const std::string& key) {
  static std::map<std::string, c10::OperatorHandle> handles;
  auto it = handles.find(key);
  if (it == handles.end()) {
    const auto dot = key.find('.');
    std::string name = key.substr(0, dot);
    if (name.find("::") == std::string::npos) name = "aten::" + name;
    const std::string overload = dot == std::string::npos ? "" : key.substr(dot + 1);
    it = handles.emplace(key, c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str())).first;
  }
  return it->second;
}

std::string traced_name(const std::string& key) { return key.find("::") == std::string::npos ? "aten::" + key : key; }

// ------------------------------------------------------------------------------------------------
// Building inputs
// ------------------------------------------------------------------------------------------------

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Floating tensors get their dtype from here, in argument order.
class FloatDtypes {
 public:
  FloatDtypes(const std::string& policy, at::ScalarType lower) : policy_(policy), lower_(lower) {}
  at::ScalarType next() {
    const size_t i = count_++;
    if (policy_ == "lower_precision_fp") return at::kFloat;
    if (policy_ == "promote") return i % 2 == 0 ? lower_ : at::kFloat;
    return lower_;
  }

 private:
  std::string policy_;
  at::ScalarType lower_;
  size_t count_ = 0;
};

at::Tensor make_tensor(const TensorSpec& spec, FloatDtypes& dtypes) {
  at::Tensor t;
  switch (spec.fill) {
    case Fill::Normal: t = at::randn(spec.shape); break;
    case Fill::Positive: t = at::rand(spec.shape) + 0.5; break;
    case Fill::Probability: t = at::rand(spec.shape) * 0.8 + 0.1; break;
    case Fill::Spd: {
      const int64_t n = spec.shape.at(0);
      const at::Tensor a = at::randn({n, n});
      t = at::matmul(a, a.mT()) + n * at::eye(n);
      if (!spec.view.empty()) t = t.reshape(spec.view);
      break;
    }
    case Fill::Tril: {
      const int64_t n = spec.shape.at(0);
      t = at::randn({n, n}).tril() + n * at::eye(n);
      break;
    }
    case Fill::Integers:
      return at::tensor(spec.values, at::TensorOptions().dtype(at::kLong)).reshape(spec.shape).to(spec.int_dtype);
  }
  return t.to(dtypes.next());
}

bool is_tensor_list_type(const c10::TypePtr& type) {
  const auto list = type->castRaw<c10::ListType>();
  return list != nullptr && list->getElementType()->kind() == c10::TypeKind::TensorType;
}

// The arguments of one call, in schema order.
torch::jit::Stack build_inputs(const c10::FunctionSchema& schema, const std::string& op, const std::string& policy,
                               at::ScalarType lower) {
  static const Recipe kDefault{};
  const auto found = recipes().find(op);
  const Recipe& recipe = found == recipes().end() ? kDefault : found->second;
  for (const auto& [name, value] : recipe.args) {
    const bool known = std::any_of(schema.arguments().begin(), schema.arguments().end(),
                                   [&](const c10::Argument& a) { return a.name() == name; });
    if (!known) throw std::runtime_error("recipe of " + op + " names no argument '" + name + "' of " + toString(schema));
  }
  at::manual_seed(fnv1a(op));
  FloatDtypes dtypes(policy, lower);
  torch::jit::Stack stack;
  for (const c10::Argument& arg : schema.arguments()) {
    const auto given = recipe.args.find(arg.name());
    if (given != recipe.args.end()) {
      const auto& v = given->second.value;
      if (const auto* t = std::get_if<TensorSpec>(&v)) {
        stack.emplace_back(make_tensor(*t, dtypes));
      } else if (const auto* ts = std::get_if<std::vector<TensorSpec>>(&v)) {
        std::vector<at::Tensor> list;
        for (const TensorSpec& spec : *ts) list.push_back(make_tensor(spec, dtypes));
        stack.emplace_back(std::move(list));
      } else {
        stack.push_back(std::get<c10::IValue>(v));
      }
      continue;
    }
    const c10::TypePtr& type = arg.type();
    if (type->kind() == c10::TypeKind::TensorType) {
      stack.emplace_back(make_tensor(randn(recipe.shape), dtypes));
    } else if (is_tensor_list_type(type)) {
      stack.emplace_back(std::vector<at::Tensor>{make_tensor(randn(recipe.shape), dtypes), make_tensor(randn(recipe.shape), dtypes)});
    } else if (arg.default_value().has_value()) {
      stack.push_back(*arg.default_value());
    } else if (type->kind() == c10::TypeKind::OptionalType) {
      stack.emplace_back();  // None (e.g. `Tensor? bias` without a default)
    } else {
      throw std::runtime_error("no value for argument '" + arg.name() + "' of " + toString(schema) +
                               ": give it in the op's recipe");
    }
  }
  return stack;
}

// ------------------------------------------------------------------------------------------------
// Running under autocast
// ------------------------------------------------------------------------------------------------

// CPU autocast on with `dtype`, as torch.autocast("cpu", dtype) sets it; the previous state comes
// back (and the cast cache is cleared) on exit.
class CpuAutocast {
 public:
  explicit CpuAutocast(at::ScalarType dtype)
      : enabled_(at::autocast::is_autocast_enabled(at::kCPU)), dtype_(at::autocast::get_autocast_dtype(at::kCPU)) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
  }
  ~CpuAutocast() {
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, enabled_);
    at::autocast::set_autocast_dtype(at::kCPU, dtype_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool enabled_;
  at::ScalarType dtype_;
};

struct CallResult {
  torch::jit::Stack outputs;
  std::string error;  // what the call threw, if it did
};

// Whose state turns autocast on: PyTorch's (as torch.autocast does), or autocastgen's
// AutocastScope for a library generated with --state autocastgen.
enum class Driver { torch_autocast, autocastgen_scope };

#ifdef AUTOCASTGEN_OWN_STATE
constexpr Driver kLibraryDriver = Driver::autocastgen_scope;
#else
constexpr Driver kLibraryDriver = Driver::torch_autocast;
#endif

CallResult run_case(const c10::OperatorHandle& op, const torch::jit::Stack& inputs, at::ScalarType dtype, Driver driver) {
  CallResult run;
  run.outputs = inputs;  // IValue copies share the tensors; the ops are functional
  try {
    if (driver == Driver::torch_autocast) {
      const CpuAutocast autocast(dtype);
      op.callBoxed(run.outputs);
    } else {
      const autocastgen::AutocastScope scope(at::kCPU, dtype);
      op.callBoxed(run.outputs);
    }
  } catch (const c10::Error& e) {  // the message without the C++ backtrace, which differs
    run.error = e.what_without_backtrace();
    run.outputs.clear();
  } catch (const std::exception& e) {
    run.error = e.what();
    run.outputs.clear();
  }
  return run;
}

// ------------------------------------------------------------------------------------------------
// The environment: baselines first, then the library
// ------------------------------------------------------------------------------------------------

struct Baseline {
  torch::jit::Stack inputs;
  CallResult run;
  std::set<size_t> irreproducible;  // outputs PyTorch's own kernel does not repeat bit for bit
  std::string input_error;
  uint64_t wrapper_calls = 0;  // generated wrappers that ran during the baseline (must be 0)
};

struct State {
  std::map<std::string, Baseline> baselines;  // by test name
  void* library = nullptr;
  std::string load_error;
  bool loaded_before_baselines = false;
};

State& state() {
  static State s;
  return s;
}

std::set<std::string> selected_case_names() {
  std::set<std::string> names;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(j);
      const std::string name = info.name();
      if (info.should_run() && info.value_param() != nullptr) names.insert(name.substr(name.rfind('/') + 1));
    }
  }
  return names;
}

class BaselineEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    State& s = state();
    s.loaded_before_baselines = dlopen(AUTOCASTGEN_CPU_LIBRARY, RTLD_NOW | RTLD_NOLOAD) != nullptr;
    const std::set<std::string> selected = selected_case_names();
    auto& trace = autocastgen::torch::wrapper_trace();
    for (const Case& c : manifest().cases) {
      if (selected.count(c.test_name) == 0) continue;
      Baseline& b = s.baselines[c.test_name];
      try {
        const c10::OperatorHandle& op = find_op(c.op);
        b.inputs = build_inputs(op.schema(), c.op, c.policy, dtype_named(c.dtype));
        const uint64_t before = trace.calls;
        b.run = run_case(op, b.inputs, dtype_named(c.dtype), Driver::torch_autocast);
        // Outputs that differ between calls of PyTorch's own kernel with the same inputs (seen:
        // linalg_lstsq in 2.11's CPU build, 6 distinct results in 200 calls): up to 16 more calls,
        // so that such an output is found with near certainty.
        for (int call = 0; call < 16 && b.run.error.empty(); ++call) {
          const CallResult again = run_case(op, b.inputs, dtype_named(c.dtype), Driver::torch_autocast);
          for (size_t i = 0; i < b.run.outputs.size() && i < again.outputs.size(); ++i)
            if (first_difference(b.run.outputs[i], again.outputs[i], "output")) b.irreproducible.insert(i);
        }
        b.wrapper_calls = trace.calls - before;
      } catch (const std::exception& e) {
        b.input_error = e.what();
      }
    }
    s.library = dlopen(AUTOCASTGEN_CPU_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
    if (s.library == nullptr) s.load_error = dlerror();
  }
  // The library stays loaded: its kernels are registered with the dispatcher for the process.
};

// ------------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------------

TEST(Manifest, LoadsAndListsAutocastCpuOps) {
  const Manifest& m = manifest();
  ASSERT_EQ(m.error, "") << AUTOCASTGEN_CPU_MANIFEST;
  EXPECT_EQ(m.dispatch_key, "AutocastCPU");
  EXPECT_FALSE(m.ops.empty());
  EXPECT_FALSE(m.lower_precision.empty());
  for (const auto& op : m.ops) {
    EXPECT_EQ(op.at("dispatch_key").get<std::string>(), "AutocastCPU") << op.dump();
    EXPECT_EQ(kRunnablePolicies.count(op.at("policy").get<std::string>()), 1u)
        << op.dump() << ": no conformance run for this policy; add one, or list the op in not_covered()";
  }
}

// Does the running PyTorch release define the op? The tables above serve every release 2.4-2.15
// (the policy's release gates decide what the manifest lists); entries for ops that this release
// lacks are not stale.
bool in_this_release(const std::string& key) {
  const auto dot = key.find('.');
  const std::string overload = dot == std::string::npos ? "" : key.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchema({"aten::" + key.substr(0, dot), overload}).has_value();
}

// Does the running release's own CPU autocast register the op? (cpu.yaml's release gates follow
// it: 2.4 and 2.5 have _addmm_activation but not on AutocastCPU.) Ours are registered for the
// manifest's ops only, so for any other op the kernel found is PyTorch's.
bool in_this_releases_autocast_cpu(const std::string& key) {
  const auto dot = key.find('.');
  const std::string overload = dot == std::string::npos ? "" : key.substr(dot + 1);
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::" + key.substr(0, dot), overload});
  return op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::AutocastCPU);
}

TEST(Manifest, EveryOpIsCoveredOrListedWithAReason) {
  const Manifest& m = manifest();
  ASSERT_EQ(m.error, "");
  std::set<std::string> ops;
  for (const auto& op : m.ops) ops.insert(op.at("op").get<std::string>());
  for (const auto& [op, recipe] : recipes())
    if (!in_this_release(op) || !in_this_releases_autocast_cpu(op)) ops.insert(op);
  for (const auto& [key, reason] : not_covered())
    if (!in_this_release(key.substr(0, key.find('/')))) ops.insert(key.substr(0, key.find('/')));
  for (const auto& [key, reason] : not_covered()) {
    const std::string op = key.substr(0, key.find('/'));
    EXPECT_EQ(ops.count(op), 1u) << "not_covered() names " << key << ", which the manifest does not list";
    EXPECT_FALSE(reason.empty()) << key;
  }
  for (const auto& [op, recipe] : recipes()) {
    EXPECT_EQ(ops.count(op), 1u) << "recipes() has an entry for " << op << ", which the manifest does not list";
  }
  for (const auto& [key, reason] : may_throw()) {
    EXPECT_EQ(ops.count(key.substr(0, key.find('/'))), 1u) << "may_throw() names " << key << ", not in the manifest";
  }
  for (const auto& [op, outputs] : unspecified_outputs()) {
    EXPECT_EQ(ops.count(op), 1u) << "unspecified_outputs() names " << op << ", which the manifest does not list";
  }
  EXPECT_EQ(m.cases.size() + m.skipped.size(), m.ops.size() * m.lower_precision.size());
  for (const std::string& skipped : m.skipped) std::cout << "[ not covered ] " << skipped << "\n";
  std::cout << "[ coverage    ] " << m.cases.size() << " cases run (" << m.ops.size() << " ops x "
            << m.lower_precision.size() << " dtypes), " << m.skipped.size() << " not covered\n";
}

TEST(Library, WasNotLoadedBeforeTheBaselinesAndLoadsAfter) {
  EXPECT_FALSE(state().loaded_before_baselines) << AUTOCASTGEN_CPU_LIBRARY << " was loaded before the baselines";
  EXPECT_NE(state().library, nullptr) << state().load_error;
}

class Conformance : public ::testing::TestWithParam<Case> {};

TEST_P(Conformance, MatchesPyTorchBuiltinKernel) {
  const Case& c = GetParam();
  State& s = state();
  ASSERT_NE(s.library, nullptr) << "cannot load " << AUTOCASTGEN_CPU_LIBRARY << ": " << s.load_error;
  const auto found = s.baselines.find(c.test_name);
  ASSERT_NE(found, s.baselines.end()) << "no baseline was recorded";
  const Baseline& b = found->second;
  ASSERT_EQ(b.input_error, "") << "cannot build the inputs";
  const bool baseline_threw = !b.run.error.empty();
  if (baseline_threw) {
    ASSERT_EQ(may_throw().count(c.op + "/" + c.dtype), 1u)
        << "PyTorch's own kernel rejected the recipe's inputs (fix the recipe): " << b.run.error;
  }
  ASSERT_EQ(b.wrapper_calls, 0u) << "a generated wrapper ran while the baseline was recorded";

  const c10::OperatorHandle& op = find_op(c.op);
  auto& trace = autocastgen::torch::wrapper_trace();
  trace.last_op = nullptr;
  const uint64_t before = trace.calls;
  const CallResult ours = run_case(op, b.inputs, dtype_named(c.dtype), kLibraryDriver);
  if (baseline_threw) {
    EXPECT_EQ(ours.error, b.run.error) << "PyTorch's kernel threw; ours must throw the same";
  } else {
    ASSERT_EQ(ours.error, "") << "our wrapper threw where PyTorch's kernel did not";
  }

  EXPECT_EQ(trace.calls, before + 1) << "expected exactly one generated wrapper call";
  ASSERT_NE(trace.last_op, nullptr) << "no generated wrapper ran: PyTorch's kernel is still registered";
  EXPECT_EQ(std::string(trace.last_op), traced_name(c.op));

  std::set<size_t> metadata_only;
  if (const auto unspecified = unspecified_outputs().find(c.op); unspecified != unspecified_outputs().end()) {
    for (const auto& [index, reason] : unspecified->second) metadata_only.insert(index);
  }
  // An output that PyTorch's own kernel does not reproduce bit for bit can only be compared by its
  // metadata.
  for (size_t i : b.irreproducible) {
    if (metadata_only.insert(i).second)
      std::cout << "[ irreproducible ] " << c.test_name << " output " << i
                << ": PyTorch's own kernel gives other bits on other calls; compared by metadata\n";
  }
  const auto diff = outputs_difference(b.run.outputs, ours.outputs, metadata_only);
  EXPECT_FALSE(diff.has_value()) << *diff;
}

INSTANTIATE_TEST_SUITE_P(CpuPolicy, Conformance, ::testing::ValuesIn(manifest().cases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.test_name; });

// ---- the comparison itself must notice differences

TEST(Comparison, IdenticalOutputsMatch) {
  const at::Tensor t = at::randn({3, 4});
  EXPECT_FALSE(outputs_difference({t, c10::IValue(c10::ivalue::Tuple::create({t.clone(), c10::IValue(int64_t{2})}))},
                                  {t.clone(), c10::IValue(c10::ivalue::Tuple::create({t.clone(), c10::IValue(int64_t{2})}))})
                   .has_value());
}

TEST(Comparison, NaNsInTheSamePlacesMatch) {
  const at::Tensor t = at::tensor({1.0f, NAN, 3.0f});
  EXPECT_FALSE(tensor_difference(t, t.clone()).has_value());
}

TEST(Comparison, FindsOneDifferingBit) {
  const at::Tensor t = at::randn({5});
  at::Tensor u = t.clone();
  static_cast<unsigned char*>(u.data_ptr())[9] ^= 1;
  const auto diff = tensor_difference(t, u);
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("1 of 5 elements differ bitwise; first at flat index 2"), std::string::npos) << *diff;
}

TEST(Comparison, FindsNegativeZeroAndNaNPlacement) {
  EXPECT_TRUE(tensor_difference(at::tensor({0.0f}), at::tensor({-0.0f})).has_value());
  EXPECT_TRUE(tensor_difference(at::tensor({NAN, 1.0f}), at::tensor({1.0f, NAN})).has_value());
}

TEST(Comparison, FindsDtypeSizeStrideAndDefinedness) {
  const at::Tensor t = at::randn({2, 3});
  EXPECT_TRUE(tensor_difference(t, t.to(at::kBFloat16)).has_value());
  EXPECT_TRUE(tensor_difference(t, t.reshape({3, 2})).has_value());
  EXPECT_TRUE(tensor_difference(t, t.t().contiguous().t()).has_value());  // same values, other strides
  EXPECT_TRUE(tensor_difference(t, at::Tensor()).has_value());
}

TEST(Comparison, MetadataOnlyOutputsStillNeedSameDtypeAndShape) {
  const at::Tensor t = at::randn({3});
  EXPECT_FALSE(outputs_difference({t}, {t + 1}, {0}).has_value());
  EXPECT_TRUE(outputs_difference({t}, {t + 1}, {}).has_value());
  EXPECT_TRUE(outputs_difference({t}, {t.to(at::kBFloat16)}, {0}).has_value());
  EXPECT_TRUE(outputs_difference({t}, {at::randn({4})}, {0}).has_value());
}

TEST(Comparison, FindsDifferencesInsideTuplesAndLists) {
  const at::Tensor t = at::randn({3});
  at::Tensor u = t.clone();
  u[1] = u[1] + 1;
  const c10::IValue a = c10::ivalue::Tuple::create({t, t});
  const c10::IValue b = c10::ivalue::Tuple::create({t, u});
  const auto diff = outputs_difference({a}, {b});
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("output 0[1]"), std::string::npos) << *diff;
  EXPECT_TRUE(outputs_difference({c10::IValue(std::vector<at::Tensor>{t, t})}, {c10::IValue(std::vector<at::Tensor>{t})})
                  .has_value());
  EXPECT_TRUE(outputs_difference({c10::IValue(std::vector<at::Tensor>{t, t})}, {c10::IValue(std::vector<at::Tensor>{t, u})})
                  .has_value());
  EXPECT_TRUE(outputs_difference({t}, {t, t}).has_value());
  EXPECT_TRUE(outputs_difference({c10::IValue(int64_t{1})}, {c10::IValue(int64_t{2})}).has_value());
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new BaselineEnvironment);  // gtest owns it
  return RUN_ALL_TESTS();
}
