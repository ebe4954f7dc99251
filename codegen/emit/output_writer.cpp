// Change-aware, atomic file output.
#include "emit/output_writer.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <unistd.h>

namespace autocastgen::emit {

namespace fs = std::filesystem;

namespace {
bool same_content(const fs::path& path, const std::string& content) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream existing;
  existing << in.rdbuf();
  return existing.str() == content;
}

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

bool write_if_changed(const fs::path& path, const std::string& content, bool& changed, std::string& error) {
  changed = false;
  if (same_content(path, content)) return true;
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) {
    error = ec.message();
    return false;
  }
  const fs::path temp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    if (!out) {
      error = "write failed";
      fs::remove(temp, ec);
      return false;
    }
  }
  fs::rename(temp, path, ec);
  if (ec) {
    error = ec.message();
    fs::remove(temp, ec);
    return false;
  }
  changed = true;
  return true;
}

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
    if (!same_content(dir_ / f.path, f.content)) out.push_back((dir_ / f.path).string());
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

std::string OutputWriter::depfile(const std::vector<fs::path>& inputs) const {
  std::string text;
  for (const File& f : files_) {
    text += escape_make(fs::absolute(dir_ / f.path).lexically_normal().string()) + ":";
    for (const fs::path& input : inputs) text += " \\\n  " + escape_make(fs::absolute(input).lexically_normal().string());
    text += "\n";
  }
  return text;
}

}  // namespace autocastgen::emit
