// What the cast-policy values of backends' wrapper templates mean in the policy language, and
// which lower-precision dtype a per-dtype template's parameter is for. Plain strings, no Clang.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "policy/policy.h"

namespace autocastgen::import {

// Note [per-dtype wrapper templates]
// PyTorch's wrapper template takes one CastPolicy (and the device it casts for); a backend may
// write one that takes a cast policy per lower-precision dtype instead, and picks the one of the
// dtype autocast runs in (IPEX's CPU wrapper: `<DtypeCastPolicy bf16_cast_policy, DtypeCastPolicy
// fp16_cast_policy, ...>`). The importer reads any wrapper template whose leading arguments are
// several values of an enum named `...CastPolicy` as one: each parameter's name says its dtype
// (`bf16`/`bfloat16`, `fp16`/`float16`/`half`), and each value becomes an entry with `dtypes:`
// (policy-language.md, precision rules); values that agree make one plain entry, and
// `fallthrough` (no cast) makes none, so a call in that dtype falls through as the wrapper lets
// it. A value the language has no word for, a parameter whose name says no dtype, and two
// parameters for one dtype are errors naming the template.

// The meaning of a cast-policy value: a policy, or no entry (`fallthrough`, the op runs as it is).
struct CastValue {
  std::optional<policy::PolicyKind> policy;  // nullopt: fallthrough
};

// `lower_precision_fp` and IPEX's `user_defined_dtype` (the autocast dtype) are
// lower_precision_fp; fp32, fp32_set_opt_dtype, fp32_append_dtype and promote are themselves;
// `fallthrough` is no entry. Anything else (banned and fp8 have no wrapper-template form): nullopt.
[[nodiscard]] std::optional<CastValue> cast_value(std::string_view enumerator);

// The values cast_value knows, for messages: "lower_precision_fp (or user_defined_dtype), ...".
[[nodiscard]] std::string_view known_cast_values();

// The lower-precision dtype a per-dtype template's parameter is for, by its name
// (`bf16_cast_policy` -> bfloat16, `fp16_cast_policy` -> float16); nullopt when it says none.
[[nodiscard]] std::optional<std::string> dtype_of_parameter(std::string_view name);

}  // namespace autocastgen::import
