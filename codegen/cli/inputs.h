// Shared by the CLI verbs: locating and loading the op-schema inputs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/schema_set.h"
#include "model/torch_version.h"
#include "policy/resolver.h"
#include "support/diagnostics.h"
#include "support/yaml.h"

namespace autocastgen::cli {

// The installed PyTorch's native_functions.yaml: $AUTOCASTGEN_NATIVE_FUNCTIONS, else the path found
// at build time, else asks the Python interpreter where torchgen lives. Sets `why_not` on failure.
[[nodiscard]] std::optional<std::filesystem::path> installed_native_functions(std::string& why_not);

// The release a schema file belongs to, read from the torch package (site-packages/torch/version.py)
// or release cache folder (version.txt, scripts/torch-releases) whose torchgen/ holds it.
struct DetectedRelease {
  model::TorchVersion version;
  std::filesystem::path evidence;  // the file the version was read from
};
[[nodiscard]] std::optional<DetectedRelease> release_of_schema_file(const std::filesystem::path& path);

// The release cache of scripts/torch-releases: $AUTOCASTGEN_TORCH_CACHE, else
// $XDG_CACHE_HOME/autocastgen/torch, else ~/.cache/autocastgen/torch. A release's folder holds
// what its wheel ships for build time: include/, torchgen/ (the schemas) and version.txt.
[[nodiscard]] std::filesystem::path release_cache_root();

// The cached folder of `version` (X.Y: the newest patch there; X.Y.Z: that one); sets `why_not`,
// naming the command that fetches it, when the cache lacks it.
[[nodiscard]] std::optional<std::filesystem::path> cached_release(const model::TorchVersion& version, std::string& why_not);

// The op schemas a verb reads, and the PyTorch release they are taken to be.
struct SchemaInputs {
  model::SchemaSet schemas;
  std::vector<uint32_t> files;                       // buffer ids of the schema files, in order
  std::optional<model::TorchVersion> torch_version;  // nullopt: no --torch-version and none found
  // The release cache's folder the schemas were read from (--torch-version of a release other than
  // the installed one, without --schemas); its include/ holds the release's C++ headers, which the
  // importer compiles against. Empty otherwise.
  std::filesystem::path release_dir;
  [[nodiscard]] policy::ResolveTarget target() const { return {torch_version}; }
};

// Adds `--schemas FILE...` and `--torch-version X.Y[.Z]` to a verb.
void add_schema_options(CLI::App& verb, std::vector<std::filesystem::path>& schemas, std::string& torch_version);
// Adds `--extra-schemas FILE...`.
void add_extra_schemas_option(CLI::App& verb, std::vector<std::filesystem::path>& extra);

// Loads `paths`, then `extra` (--extra-schemas, the imports' and audits' backend ops), into
// `sources` and settles the target release: `torch_version` when given (checked against the
// release the files are found in), else the release of the files, else the installed torch's.
// Without `paths`: the installed torch's file, or with a `torch_version` of another release, that
// release's from the release cache (an error naming the command that fetches it when the cache
// lacks it). Reports problems to `diags`.
[[nodiscard]] std::optional<SchemaInputs> load_schema_inputs(const std::vector<std::filesystem::path>& paths,
                                                             const std::string& torch_version, SourceManager& sources,
                                                             DiagnosticEngine& diags, const std::vector<std::filesystem::path>& extra = {});

// Reads one file into `sources`, reporting an unreadable file (or one over `max_bytes`, the limit
// for `files`: Note [yaml limits]) as an error.
[[nodiscard]] std::optional<uint32_t> read_input(const std::filesystem::path& path, SourceManager& sources,
                                                 DiagnosticEngine& diags, size_t max_bytes = kMaxSourceBytes,
                                                 std::string_view files = "input files");

}  // namespace autocastgen::cli
