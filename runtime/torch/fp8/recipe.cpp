// The fp8 recipe: validation, canonical text, and the names the policy language uses.
#include "autocastgen/fp8/recipe.h"

#include <sstream>

#include <c10/util/Exception.h>

namespace autocastgen::fp8 {

namespace {

const char* fp8_dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case c10::ScalarType::Float8_e5m2: return "float8_e5m2";
    default: return c10::toString(t);
  }
}

}  // namespace

void Recipe::validate() const {
  TORCH_CHECK(forward_dtype == c10::ScalarType::Float8_e4m3fn,
              "autocastgen fp8 recipe: forward must be float8_e4m3fn, got ", fp8_dtype_name(forward_dtype),
              " (PyTorch's CUDA _scaled_mm has no float8_e5m2 x float8_e5m2 GEMM)");
  TORCH_CHECK(backward_dtype == c10::ScalarType::Float8_e5m2 || backward_dtype == c10::ScalarType::Float8_e4m3fn,
              "autocastgen fp8 recipe: backward must be float8_e5m2 or float8_e4m3fn, got ",
              fp8_dtype_name(backward_dtype));
  TORCH_CHECK(granularity == Granularity::Tensorwise || granularity == Granularity::Rowwise ||
                  granularity == Granularity::RowwiseWithGwHp,
              "autocastgen fp8 recipe: granularity must be tensorwise, rowwise or rowwise_with_gw_hp");
  TORCH_CHECK(!is_rowwise(granularity) || scaling == Scaling::Current, "autocastgen fp8 recipe: granularity ",
              granularity_name(granularity), " takes current scaling only (delayed row-wise scales are not implemented)");
  TORCH_CHECK(!is_rowwise(granularity) || backward_dtype == c10::ScalarType::Float8_e4m3fn,
              "autocastgen fp8 recipe: granularity ", granularity_name(granularity),
              " needs backward float8_e4m3fn, got ", fp8_dtype_name(backward_dtype),
              " (row-wise scales use e4m3 for every operand, as torchao's rowwise recipe does)");
  TORCH_CHECK(scaling == Scaling::Current || scaling == Scaling::Delayed,
              "autocastgen fp8 recipe: scaling must be current or delayed");
  TORCH_CHECK(amax_history_len >= 1 && amax_history_len <= 65536,
              "autocastgen fp8 recipe: amax_history_len must be in [1, 65536], got ", amax_history_len);
  TORCH_CHECK(select == Select::All || select == Select::Auto || select == Select::Measured,
              "autocastgen fp8 recipe: select must be all, auto or measured");
  TORCH_CHECK(margin >= 0 && margin <= 64, "autocastgen fp8 recipe: margin must be in [0, 64], got ", margin);
}

std::string Recipe::str() const {
  std::ostringstream out;
  out << "{scaling: " << scaling_name(scaling) << ", granularity: " << granularity_name(granularity)
      << ", forward: " << fp8_dtype_name(forward_dtype) << ", backward: " << fp8_dtype_name(backward_dtype);
  if (scaling == Scaling::Delayed) out << ", amax_history_len: " << amax_history_len;
  out << ", margin: " << margin;
  if (select != Select::All) out << ", select: " << select_name(select);
  out << "}";
  return out.str();
}

const char* scaling_name(Scaling s) { return s == Scaling::Current ? "current" : "delayed"; }

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::Rowwise: return "rowwise";
    case Granularity::RowwiseWithGwHp: return "rowwise_with_gw_hp";
    default: return "tensorwise";
  }
}

const char* select_name(Select s) {
  switch (s) {
    case Select::All: return "all";
    case Select::Auto: return "auto";
    case Select::Measured: return "measured";
  }
  return "all";
}

std::optional<Select> parse_select(std::string_view name) {
  if (name == "all") return Select::All;
  if (name == "auto") return Select::Auto;
  if (name == "measured") return Select::Measured;
  return std::nullopt;
}

std::optional<Scaling> parse_scaling(std::string_view name) {
  if (name == "current") return Scaling::Current;
  if (name == "delayed") return Scaling::Delayed;
  return std::nullopt;
}

std::optional<Granularity> parse_granularity(std::string_view name) {
  if (name == "tensorwise") return Granularity::Tensorwise;
  if (name == "rowwise") return Granularity::Rowwise;
  if (name == "rowwise_with_gw_hp") return Granularity::RowwiseWithGwHp;
  return std::nullopt;
}

std::optional<c10::ScalarType> parse_fp8_dtype(std::string_view name) {
  if (name == "float8_e4m3fn") return c10::ScalarType::Float8_e4m3fn;
  if (name == "float8_e5m2") return c10::ScalarType::Float8_e5m2;
  return std::nullopt;
}

}  // namespace autocastgen::fp8
