// Shared by the CLI verbs: locating and loading the op-schema inputs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/schema_set.h"
#include "support/diagnostics.h"

namespace autocastgen::cli {

// The installed PyTorch's native_functions.yaml: $AUTOCASTGEN_NATIVE_FUNCTIONS, else the path found
// at build time, else asks the Python interpreter where torchgen lives. Sets `why_not` on failure.
[[nodiscard]] std::optional<std::filesystem::path> installed_native_functions(std::string& why_not);

// Loads `paths` (or the installed file when empty) into `sources`; reports problems to `diags`.
// When `files` is given it receives the buffer ids of the schema files, in order.
[[nodiscard]] std::optional<model::SchemaSet> load_schemas(const std::vector<std::filesystem::path>& paths,
                                                           SourceManager& sources, DiagnosticEngine& diags,
                                                           std::vector<uint32_t>* files = nullptr);

// Reads one file into `sources`, reporting an unreadable file as an error.
[[nodiscard]] std::optional<uint32_t> read_input(const std::filesystem::path& path, SourceManager& sources,
                                                 DiagnosticEngine& diags);

}  // namespace autocastgen::cli
