// fp8 matrix multiplies for autocast: linear, mm and addmm in float8 with scaling state (docs/fp8.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>

#include "autocastgen/fp8/recipe.h"

namespace autocastgen::fp8 {

struct CallOptions {
  // Reuse a weight's fp8 copy on this thread until clear_weight_cache() (the glue: the autocast
  // scope's cache_enabled). Without it a weight is quantised at every call.
  bool cache_weights = true;
  // Tests and benchmarks: false quantises with separate ATen ops (abs, amax, mul, clamp, to), the
  // unfused reference for the fused kernels.
  bool fused_kernels = true;
  // Tests: lay the GEMM operands out as CUDA's _scaled_mm demands (first row-major, second
  // column-major) on every device, so that the CUDA layout code runs on CPU too.
  bool cuda_layout_everywhere = false;
};

// Whether a call can run in fp8. `reason` says why not, for diagnostics and statistics.
struct Support {
  bool ok = false;
  const char* reason = "";
  explicit operator bool() const { return ok; }
};

// Note [fp8 shapes]
// PyTorch's CUDA _scaled_mm needs both dimensions of its second operand and the inner dimension
// to be multiples of 16. A linear or mm with an [M, K] x [K, N] product runs three GEMMs: the
// forward (K, N), the input gradient (N, K) and the weight gradient ([N, M] x [M, K] or
// [K, M] x [M, N]: M and the other two). So fp8 needs K % 16 == 0 and N % 16 == 0, and also
// M % 16 == 0 when the right operand (the weight of a linear, mat2 of mm/addmm) will get a
// gradient (grad mode on and it requires grad). The same rule holds on CPU, where _scaled_mm
// takes any shape, so a model takes the same fp8-or-fallback decisions on every device. Also
// refused: devices whose PyTorch has no _scaled_mm kernel (the dispatcher is asked), operands
// that are not float32/bfloat16/float16 dense tensors on one device, empty dimensions, and an
// out_dtype other than bfloat16, float16 or float32.
//
// Operands that are tensor subclasses met eagerly (DTensors from tensor parallel) are asked, once
// the rest holds, whether their layout takes fp8 per shard (Note [fp8 under tensor parallel] in
// runtime/torch/fp8/gemm.cpp): `scaling` matters there only (delayed scaling of a sharded weight
// is refused).
[[nodiscard]] TORCH_API Support fp8_linear_support(const at::Tensor& input, const at::Tensor& weight,
                                                   const std::optional<at::Tensor>& bias, c10::ScalarType out_dtype,
                                                   Scaling scaling = Scaling::Current);
[[nodiscard]] TORCH_API Support fp8_mm_support(const at::Tensor& self, const at::Tensor& mat2,
                                               c10::ScalarType out_dtype, Scaling scaling = Scaling::Current);
[[nodiscard]] TORCH_API Support fp8_addmm_support(const at::Tensor& self, const at::Tensor& mat1,
                                                  const at::Tensor& mat2, c10::ScalarType out_dtype,
                                                  Scaling scaling = Scaling::Current);
[[nodiscard]] inline bool fp8_linear_supported(const at::Tensor& input, const at::Tensor& weight,
                                               const std::optional<at::Tensor>& bias, c10::ScalarType out_dtype) {
  return fp8_linear_support(input, weight, bias, out_dtype).ok;
}
[[nodiscard]] inline bool fp8_mm_supported(const at::Tensor& self, const at::Tensor& mat2, c10::ScalarType out_dtype) {
  return fp8_mm_support(self, mat2, out_dtype).ok;
}
[[nodiscard]] inline bool fp8_addmm_supported(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                                              c10::ScalarType out_dtype) {
  return fp8_addmm_support(self, mat1, mat2, out_dtype).ok;
}

// input [*, K], weight [N, K], bias [N] or none -> [*, N] in out_dtype; differentiable in all
// three (once: the backward is not itself differentiable). Throws c10::Error when the call is not
// supported (check fp8_linear_support first) or the recipe is invalid.
[[nodiscard]] TORCH_API at::Tensor fp8_linear(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias, const Recipe& recipe,
                                              c10::ScalarType out_dtype, const CallOptions& options = {});
// self [M, K] x mat2 [K, N] -> [M, N] in out_dtype.
[[nodiscard]] TORCH_API at::Tensor fp8_mm(const at::Tensor& self, const at::Tensor& mat2, const Recipe& recipe,
                                          c10::ScalarType out_dtype, const CallOptions& options = {});
// beta * self + alpha * (mat1 x mat2), self broadcastable to [M, N]. Any real beta and alpha:
// alpha is folded into the GEMM's dequantisation scale; with beta == 1 and a 1-D self of N
// elements and a 16-bit out_dtype, self is the GEMM's bias (one rounding, like a bf16 addmm);
// otherwise the product is made in float32, beta * self added in float32 and the sum rounded
// once; beta == 0 ignores self (NaNs in it included), as PyTorch does.
[[nodiscard]] TORCH_API at::Tensor fp8_addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                                             const c10::Scalar& beta, const c10::Scalar& alpha, const Recipe& recipe,
                                             c10::ScalarType out_dtype, const CallOptions& options = {});

// The same, or nullopt when the call cannot run in fp8 (the support rule is asked once, and its
// answer left in `*refused` when given): what the fp8 policy's driver calls before falling back to
// the lower-precision dtype.
[[nodiscard]] TORCH_API std::optional<at::Tensor> try_fp8_linear(const at::Tensor& input, const at::Tensor& weight,
                                                                 const std::optional<at::Tensor>& bias,
                                                                 const Recipe& recipe, c10::ScalarType out_dtype,
                                                                 const CallOptions& options = {},
                                                                Support* refused = nullptr);
[[nodiscard]] TORCH_API std::optional<at::Tensor> try_fp8_mm(const at::Tensor& self, const at::Tensor& mat2,
                                                             const Recipe& recipe, c10::ScalarType out_dtype,
                                                             const CallOptions& options = {},
                                                                Support* refused = nullptr);
[[nodiscard]] TORCH_API std::optional<at::Tensor> try_fp8_addmm(const at::Tensor& self, const at::Tensor& mat1,
                                                                const at::Tensor& mat2, const c10::Scalar& beta,
                                                                const c10::Scalar& alpha, const Recipe& recipe,
                                                                c10::ScalarType out_dtype,
                                                                const CallOptions& options = {},
                                                                Support* refused = nullptr);

// --- The weight cache (Note [fp8 weight cache] in runtime/torch/fp8/weight_cache.cpp) -------------
struct CacheStats {
  std::uint64_t quantizations = 0;  // weights quantised (cache misses, or every use without the cache)
  std::uint64_t hits = 0;           // uses served from the cache
  std::size_t entries = 0;          // fp8 copies held now
};
// This thread's cache for `device`.
[[nodiscard]] TORCH_API CacheStats weight_cache_stats(c10::DeviceType device);
// Drops this thread's fp8 weight copies for `device` (the glue: when the outermost autocast scope
// ends). The counters stay.
TORCH_API void clear_weight_cache(c10::DeviceType device);
TORCH_API void reset_weight_cache_stats(c10::DeviceType device);

// --- Delayed scaling state (Note [delayed scaling state] in delayed_state.cpp) ----------------------
struct DelayedScalingSnapshot {
  std::vector<float> amax_history;  // most recent first, as many as recorded (<= amax_history_len)
  float scale = 1.0f;               // the scale the next cast of the weight will use
  std::int64_t casts = 0;           // casts recorded so far
};
// The state kept for `weight` under `forward_dtype`, if any (process-wide, shared by threads).
// Reads device memory (a sync on CUDA): for tests and inspection.
[[nodiscard]] TORCH_API std::optional<DelayedScalingSnapshot> delayed_scaling_state(
    const at::Tensor& weight, c10::ScalarType forward_dtype = c10::ScalarType::Float8_e4m3fn);
// Forgets every weight's history (a new run, a restored checkpoint).
TORCH_API void reset_delayed_scaling_state();
[[nodiscard]] TORCH_API std::size_t delayed_scaling_state_size();

}  // namespace autocastgen::fp8
