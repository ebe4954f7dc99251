// The fp8 recipe: how operands are scaled and which fp8 formats the forward and backward GEMMs use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>

namespace autocastgen::fp8 {

// current: each operand's amax is measured at every call (an amax pass, then a cast pass).
// delayed: a weight is cast with a scale derived from the amaxes of its previous casts and the
// cast records its new amax in the same pass (Transformer Engine's delayed scaling). Activations
// and gradients are always current-scaled (docs/fp8.md, "Scaling").
enum class Scaling : std::uint8_t { Current, Delayed };

// tensorwise: one scale per tensor. rowwise: one scale per row of each GEMM operand along the
// reduced (inner) dimension, in every GEMM, powers of two (Note [fp8 rowwise] in
// runtime/torch/fp8/rowwise.cpp). rowwise_with_gw_hp: rowwise, except that the weight gradient is
// computed in the lower-precision dtype (no fp8) and the weight is scaled tensorwise for the input
// gradient.
enum class Granularity : std::uint8_t { Tensorwise, Rowwise, RowwiseWithGwHp };

// Which GEMMs of the fp8 list run in fp8 (Note [fp8 selection] in runtime/torch/fp8/select.cpp):
// all that the support rule takes; auto: those a built-in rule per device class expects to be
// faster in fp8 than in the lower-precision dtype; measured: those measured faster on this device
// (the first call of each shape class times both, decisions cached per device, PyTorch release and
// shape class, and agreed by every rank of a process group).
enum class Select : std::uint8_t { All, Auto, Measured };

struct Recipe {
  Scaling scaling = Scaling::Current;
  Granularity granularity = Granularity::Tensorwise;
  // Inputs and weights in the forward GEMM; the gradient of the output in the backward GEMMs.
  c10::ScalarType forward_dtype = c10::ScalarType::Float8_e4m3fn;
  c10::ScalarType backward_dtype = c10::ScalarType::Float8_e5m2;
  // Delayed scaling: amaxes kept per weight (1 = only the most recent one).
  std::int64_t amax_history_len = 16;
  // scale = fp8_max / amax / 2^margin, for every scaled tensor (Note [fp8 scale]).
  std::int64_t margin = 0;
  Select select = Select::All;

  bool operator==(const Recipe&) const = default;

  // Throws c10::Error naming the field and the accepted values: forward_dtype must be
  // float8_e4m3fn (PyTorch's CUDA _scaled_mm has no e5m2 x e5m2 GEMM, which an e5m2 forward
  // would need in the backward), backward_dtype float8_e5m2 or float8_e4m3fn,
  // 1 <= amax_history_len <= 65536, 0 <= margin <= 64; the rowwise granularities take current
  // scaling and a float8_e4m3fn backward only.
  TORCH_API void validate() const;
  // `{scaling: delayed, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2,
  // amax_history_len: 16, margin: 0}` (the history length only for delayed scaling; `, select:
  // auto` at the end when not all): the policy language's spelling.
  [[nodiscard]] TORCH_API std::string str() const;
};

[[nodiscard]] TORCH_API const char* scaling_name(Scaling s);
[[nodiscard]] TORCH_API const char* granularity_name(Granularity g);
[[nodiscard]] TORCH_API const char* select_name(Select s);
// The policy language's names ("current", "tensorwise", "rowwise", "rowwise_with_gw_hp",
// "float8_e4m3fn", "auto"); nullopt when unknown.
[[nodiscard]] TORCH_API std::optional<Scaling> parse_scaling(std::string_view name);
[[nodiscard]] TORCH_API std::optional<Granularity> parse_granularity(std::string_view name);
[[nodiscard]] TORCH_API std::optional<Select> parse_select(std::string_view name);
[[nodiscard]] TORCH_API std::optional<c10::ScalarType> parse_fp8_dtype(std::string_view name);
// Whether g scales per row (rowwise or rowwise_with_gw_hp).
[[nodiscard]] inline bool is_rowwise(Granularity g) { return g != Granularity::Tensorwise; }

}  // namespace autocastgen::fp8
