// The one output writer: collects generated files in memory, refuses duplicate paths, writes only
// files whose content changed (atomically: support/atomic_file.h), and nothing at all when there were errors.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "support/diagnostics.h"

namespace autocastgen::emit {

class OutputWriter {
 public:
  explicit OutputWriter(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // Reports an error and returns false when `relative_path` was already added.
  bool add(const std::string& relative_path, std::string content, DiagnosticEngine& diags);

  // Files whose content on disk differs from what would be written (missing ones included).
  [[nodiscard]] std::vector<std::string> stale() const;
  // Writes the stale files; nothing when `diags` already holds errors. Returns the paths written.
  std::vector<std::string> write(DiagnosticEngine& diags) const;

  // A Makefile-style depfile: every output depends on every input (absolute paths); nullopt when a
  // path holds a line break, which Make's syntax cannot express (`unwritable` names it).
  [[nodiscard]] std::optional<std::string> depfile(const std::vector<std::filesystem::path>& inputs,
                                                   std::string& unwritable) const;
  // Every input's absolute path followed by a NUL byte: any file name, for tools that are not Make
  // (compile_policy records what a library was built from with it).
  [[nodiscard]] static std::string input_list(const std::vector<std::filesystem::path>& inputs);

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

 private:
  struct File {
    std::string path;
    std::string content;
  };
  std::filesystem::path dir_;
  std::vector<File> files_;
};

}  // namespace autocastgen::emit
