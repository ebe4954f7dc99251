// The one output writer: collects generated files in memory, refuses duplicate paths, writes only
// files whose content changed (atomically), and writes nothing at all when there were errors.
#pragma once

#include <filesystem>
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

  // A Makefile-style depfile: every output depends on every input (absolute paths).
  [[nodiscard]] std::string depfile(const std::vector<std::filesystem::path>& inputs) const;

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }

 private:
  struct File {
    std::string path;
    std::string content;
  };
  std::filesystem::path dir_;
  std::vector<File> files_;
};

// Writes `content` to `path` unless it already holds exactly that; via a temporary file and a
// rename, so readers never see half a file. Returns false and sets `error` on failure.
bool write_if_changed(const std::filesystem::path& path, const std::string& content, bool& changed, std::string& error);

}  // namespace autocastgen::emit
