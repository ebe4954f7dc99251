// Turns a policy file and the files it extends into a ResolvedPolicy checked against the schemas.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "model/schema_set.h"
#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::policy {

// Reads `path` and, following `extends:` (relative to the including file), every base file.
// Returns the chain with the requested file first. Reports missing files and cycles.
[[nodiscard]] std::optional<std::vector<PolicyFile>> load_policy_chain(const std::filesystem::path& path,
                                                                       SourceManager& sources, DiagnosticEngine& diags);

// Resolves a chain (requested file first, as load_policy_chain returns it): applies the bases,
// `remove:`, expands names and globs, and checks every rule of the policy language. Reports all
// problems; nullopt when there was any error (warnings alone still give a result).
[[nodiscard]] std::optional<ResolvedPolicy> resolve_policy(const std::vector<PolicyFile>& chain,
                                                           const model::SchemaSet& schemas, DiagnosticEngine& diags);

// load_policy_chain + resolve_policy.
[[nodiscard]] std::optional<ResolvedPolicy> load_policy(const std::filesystem::path& path, const model::SchemaSet& schemas,
                                                        SourceManager& sources, DiagnosticEngine& diags);

// How policies and reports name an overload: `name[.overload]`, with `ns::` outside aten.
[[nodiscard]] std::string display_name(const model::FunctionSchema& schema);

}  // namespace autocastgen::policy
