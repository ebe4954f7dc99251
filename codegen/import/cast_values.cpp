// Cast-policy values of wrapper templates in the policy language (Note [per-dtype wrapper templates]).
#include "import/cast_values.h"

#include <algorithm>
#include <cctype>

namespace autocastgen::import {

using policy::PolicyKind;

std::optional<CastValue> cast_value(std::string_view enumerator) {
  if (enumerator == "fallthrough") return CastValue{std::nullopt};
  if (enumerator == "user_defined_dtype") return CastValue{PolicyKind::lower_precision_fp};
  const std::optional<PolicyKind> kind = policy::parse_policy_kind(enumerator);
  if (!kind || *kind == PolicyKind::banned || *kind == PolicyKind::fp8) return std::nullopt;
  return CastValue{kind};
}

std::string_view known_cast_values() {
  return "lower_precision_fp (or user_defined_dtype), fp32, fp32_set_opt_dtype, fp32_append_dtype, promote, and fallthrough "
         "(no entry)";
}

std::optional<std::string> dtype_of_parameter(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto has = [&](std::string_view part) { return lower.find(part) != std::string::npos; };
  if (has("bf16") || has("bfloat16")) return "bfloat16";
  if (has("fp16") || has("float16") || has("half")) return "float16";
  return std::nullopt;
}

}  // namespace autocastgen::import
