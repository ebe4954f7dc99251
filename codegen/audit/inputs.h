// What audit reads: policies, generated manifests and C++ registrations, all as one resolved
// model (policy::ResolvedPolicy); this file reads manifests back.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "model/schema_set.h"
#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::audit {

// What a file is, by its extension: .yaml/.yml a policy, .json a manifest, .cpp/.cc/.cxx/.cu/.h/.hpp
// (and a few more C++ spellings) C++ for the importer; nullopt for anything else.
[[nodiscard]] std::optional<policy::PolicySource> input_kind(const std::filesystem::path& path);

// Reads a manifest written by `autocastgen generate` (only `device`, `dispatch_key`,
// `lower_precision` and `ops` matter; other members are ignored). JSON is YAML, so it is read by
// the policy files' YAML reader, and its fields and entries by their field reader (the same checks
// and messages). Every op is looked up in `schemas`: a name it does not know is a warning (the
// manifest may come from another PyTorch) and the entry keeps its name without a schema.
// Reports every problem with its location; nullopt when there was an error.
[[nodiscard]] std::optional<policy::ResolvedPolicy> read_manifest(uint32_t file, std::string name,
                                                                  const model::SchemaSet& schemas,
                                                                  const SourceManager& sources, DiagnosticEngine& diags);

}  // namespace autocastgen::audit
