// How resolved policies are written as JSON, once for every output that does: `check --format
// json`, the manifests `generate` writes and `audit coverage --format json`. (Manifests are read
// back with the policy language's own field reader: audit/inputs.h.)
#pragma once

#include <nlohmann/json.hpp>

#include "policy/policy.h"

namespace autocastgen::emit {

// `op`, `policy`, and where they apply `schema`, `redispatch`, `message` and the rule's keys.
[[nodiscard]] nlohmann::ordered_json entry_json(const policy::ResolvedEntry& entry);

// A precision rule's keys (`dtypes`, `modules`, `when`, `unless`, `args`; Note [precision rules]) added to an
// entry object, as a policy file writes them; nothing for a plain entry.
void add_rule_json(nlohmann::ordered_json& entry, const policy::Rule& rule);

// The `modules:` section (Note [precision by place]) as an object in the section's order, which
// matters (the first listed of the patterns matching one module decides): {"lm_head": "fp32"}.
// Read back by policy::FieldReader::sections, as a policy file's section.
[[nodiscard]] nlohmann::ordered_json sections_json(const std::vector<policy::ModuleSection>& sections);

// `autocast: fp8:` as an object (Note [fp8 recipe]); the manifest's `fp8` member.
[[nodiscard]] nlohmann::ordered_json fp8_recipe_json(const policy::Fp8Recipe& recipe);
// The number of entries of each policy, in the language's order.
[[nodiscard]] nlohmann::ordered_json counts_json(const policy::ResolvedPolicy& policy);

}  // namespace autocastgen::emit
