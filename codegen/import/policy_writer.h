// Writes a resolved policy (what the importer found for one dispatch key) as a policy YAML file.
#pragma once

#include <string>
#include <vector>

#include "policy/policy.h"
#include "support/strings.h"

namespace autocastgen::import {

// The policy text: a header comment naming `sources` (and `schema_files`, the op-schema files
// besides a PyTorch release's that its ops need; and `release`, the PyTorch release it was read
// for when that is not the installed one), `autocast:` with the device and key, and the six lists
// in the language's order, each in the policy's order. fp32_append_dtype entries name their
// `redispatch:` target; banned entries carry their message.
[[nodiscard]] std::string policy_yaml(const policy::ResolvedPolicy& policy, const std::vector<std::string>& sources,
                                      const std::vector<std::string>& schema_files = {}, const std::string& release = {});

using ::autocastgen::yaml_quoted;  // support/strings.h

}  // namespace autocastgen::import
