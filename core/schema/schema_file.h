// Loads op-schema files in native_functions.yaml format into one SchemaSet.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/schema_set.h"
#include "support/diagnostics.h"

namespace autocastgen::schema {

// Each file is a YAML sequence of mappings with a `func:` schema string (other keys are allowed
// and ignored here). Reports every problem of every file; nullopt when there was any.
[[nodiscard]] std::optional<model::SchemaSet> load_schema_files(const std::vector<uint32_t>& files,
                                                                const SourceManager& sources,
                                                                DiagnosticEngine& diags);

}  // namespace autocastgen::schema
