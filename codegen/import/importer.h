// The C++ importer (Clang LibTooling, an optional part of the build): reads sources that register
// autocast kernels and recovers one policy per dispatch key. Built only when Clang's development
// packages are found; cli::kHaveImporter (cli/build_config.h) says whether it is.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "policy/policy.h"
#include "model/schema_set.h"
#include "support/diagnostics.h"

namespace autocastgen::import {

struct ImportOptions {
  std::vector<std::filesystem::path> files;
  // A directory holding compile_commands.json; empty: compile each file with the installed
  // PyTorch's include directories and this project's runtime headers (see default_compiler_args).
  std::filesystem::path build_dir;
  std::vector<std::string> compiler_args;  // appended to every file's command line
  // Without a compilation database: the folder whose include/ holds PyTorch's headers (a release
  // cache folder, for --torch-version); empty: the installed torch's.
  std::filesystem::path torch_dir;
};

// What a file is compiled with when there is no compilation database: C++20, the include
// directories of PyTorch (at `torch_dir`, or the installed one when it is empty) and autocastgen's
// runtime headers. Sets `why_not` when PyTorch cannot be found.
[[nodiscard]] std::optional<std::vector<std::string>> default_compiler_args(const std::filesystem::path& torch_dir,
                                                                            std::string& why_not);

// Reads every file into `sources` (diagnostics name them as given) and parses it with Clang;
// finds the TORCH_LIBRARY_IMPL blocks of autocast dispatch keys and what each m.impl registers,
// and returns one resolved policy per key (source cpp) in order of first appearance. Reports parse errors,
// unknown ops, double registrations and kernels whose policy cannot be told (warnings: they are
// left out); nullopt when there was an error.
[[nodiscard]] std::optional<std::vector<policy::ResolvedPolicy>> import_registrations(const ImportOptions& options,
                                                                                     const model::SchemaSet& schemas,
                                                                                     SourceManager& sources,
                                                                                     DiagnosticEngine& diags);

}  // namespace autocastgen::import
