// Writes a policy snapshot (what the importer found for one dispatch key) as a policy YAML file.
#pragma once

#include <string>
#include <vector>

#include "audit/snapshot.h"

namespace autocastgen::import {

// The policy text: a header comment naming `sources`, `autocast:` with the device and key, and
// the six lists in the language's order, each in the snapshot's order. fp32_append_dtype entries
// name their `redispatch:` target; banned entries carry their message.
[[nodiscard]] std::string policy_yaml(const audit::PolicySnapshot& snapshot, const std::vector<std::string>& sources);

// A YAML double-quoted scalar for `text` (escapes quotes, backslashes and control characters).
[[nodiscard]] std::string yaml_quoted(std::string_view text);

}  // namespace autocastgen::import
