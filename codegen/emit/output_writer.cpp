// Generated files collected in memory and written when changed, through the one atomic-write helper.
#include "emit/output_writer.h"

#include <fmt/format.h>

#include "support/atomic_file.h"

namespace autocastgen::emit {

namespace fs = std::filesystem;

namespace {
std::string escape_make(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ' ' || c == '#') out.push_back('\\');
    if (c == '$') out.push_back('$');
    out.push_back(c);
  }
  return out;
}
}  // namespace

bool OutputWriter::add(const std::string& relative_path, std::string content, DiagnosticEngine& diags) {
  for (const File& f : files_) {
    if (f.path == relative_path) {
      diags.error({}, fmt::format("two generated files would both be written to '{}'", (dir_ / relative_path).string()));
      return false;
    }
  }
  files_.push_back({relative_path, std::move(content)});
  return true;
}

std::vector<std::string> OutputWriter::stale() const {
  std::vector<std::string> out;
  for (const File& f : files_)
    if (!file_holds(dir_ / f.path, f.content)) out.push_back((dir_ / f.path).string());
  return out;
}

std::vector<std::string> OutputWriter::write(DiagnosticEngine& diags) const {
  std::vector<std::string> written;
  if (diags.has_errors()) return written;
  for (const File& f : files_) {
    bool changed = false;
    std::string error;
    if (!write_if_changed(dir_ / f.path, f.content, changed, error)) {
      diags.error({}, fmt::format("cannot write '{}': {}", (dir_ / f.path).string(), error));
      continue;
    }
    if (changed) written.push_back((dir_ / f.path).string());
  }
  return written;
}

std::optional<std::string> OutputWriter::depfile(const std::vector<fs::path>& inputs, std::string& unwritable) const {
  std::string text;
  const auto path_text = [&](const fs::path& path) -> std::optional<std::string> {
    std::string absolute = fs::absolute(path).lexically_normal().string();
    if (absolute.find_first_of("\n\r") != std::string::npos) {
      unwritable = absolute;
      return std::nullopt;
    }
    return escape_make(absolute);
  };
  for (const File& f : files_) {
    const std::optional<std::string> output = path_text(dir_ / f.path);
    if (!output) return std::nullopt;
    text += *output + ":";
    for (const fs::path& input : inputs) {
      const std::optional<std::string> named = path_text(input);
      if (!named) return std::nullopt;
      text += " \\\n  " + *named;
    }
    text += "\n";
  }
  return text;
}

std::string OutputWriter::input_list(const std::vector<fs::path>& inputs) {
  std::string text;
  for (const fs::path& input : inputs) (text += fs::absolute(input).lexically_normal().string()) += '\0';
  return text;
}

}  // namespace autocastgen::emit
