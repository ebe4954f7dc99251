// Registrations -> one resolved policy per dispatch key: each checked against the op schemas, and
// its precision rules resolved, as a policy file's entries would be.
#pragma once

#include <vector>

#include "import/registrations.h"
#include "model/schema_set.h"
#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::import::detail {

// One resolved policy per key (source cpp), in order of first appearance, an empty one for a block
// that registers nothing, each with the module sections of its device. Reports unknown ops, double
// registrations and registrations that cannot be resolved (errors; the caller checks the count) and
// what it leaves out (warnings).
[[nodiscard]] std::vector<policy::ResolvedPolicy> policies_from_registrations(const std::vector<Registration>& registrations,
                                                                            const std::vector<FoundBlock>& blocks,
                                                                            std::vector<ImportedSections> sections,
                                                                            const model::SchemaSet& schemas, DiagnosticEngine& diags);

}  // namespace autocastgen::import::detail
