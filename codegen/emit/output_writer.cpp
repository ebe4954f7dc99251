// Change-aware, atomic file output that survives write faults and interruptions.
#include "emit/output_writer.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fcntl.h>
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

// Note [output under faults]
// A write can fail part-way: RLIMIT_FSIZE (`ulimit -f`) sends SIGXFSZ, whose default action ends
// the process and left the temporary behind (issue 19); a full disk fails with ENOSPC; the user
// interrupts. So, while a temporary exists:
//  - SIGXFSZ is ignored: the write fails with EFBIG instead, reported as "File too large";
//  - SIGINT, SIGTERM and SIGHUP unlink the temporary (its name sits in a fixed buffer: nothing is
//    allocated in the handler), then take their default action, so the exit status still names
//    the signal;
//  - any failure (open, write, close, rename) removes the temporary and leaves `path` as it was:
//    only rename() of a complete temporary replaces it.
// SIGKILL cannot be caught: it can leave a temporary behind, never a half-written output.
namespace {

WriteFunction g_write = nullptr;
char g_temp[4096];
volatile sig_atomic_t g_temp_set = 0;
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temp_and_reraise(int signal) {
  if (g_temp_set) ::unlink(g_temp);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// The signal dispositions of Note [output under faults], for one temporary's lifetime.
class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& temp) {
    g_temp_set = 0;
    std::snprintf(g_temp, sizeof g_temp, "%s", temp.c_str());
    g_temp_set = temp.size() < sizeof g_temp;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGXFSZ, &ignore, &old_xfsz_);
    struct sigaction cleanup {};
    cleanup.sa_handler = remove_temp_and_reraise;
    ::sigemptyset(&cleanup.sa_mask);
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) {
      ::sigaction(kCleanupSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) ::sigaction(kCleanupSignals[i], &cleanup, nullptr);  // nohup stays
    }
  }
  ~TempFileGuard() {
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], &old_[i], nullptr);
    ::sigaction(SIGXFSZ, &old_xfsz_, nullptr);
    g_temp_set = 0;
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  struct sigaction old_xfsz_ {};
  struct sigaction old_[std::size(kCleanupSignals)] {};
};

// Writes all of `content` to a new file `temp`; false with the system's message on failure.
[[nodiscard]] bool write_new_file(const std::string& temp, const std::string& content, std::string& error) {
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = g_write ? g_write(fd, data, left) : ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = std::strerror(n < 0 ? errno : EIO);
      ::close(fd);
      return false;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    error = std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

void set_write_function_for_testing(WriteFunction write) { g_write = write; }

bool write_if_changed(const fs::path& path, const std::string& content, bool& changed, std::string& error) {
  changed = false;
  if (same_content(path, content)) return true;
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) {
    error = ec.message();
    return false;
  }
  const std::string temp = path.string() + fmt::format(".tmp{}", ::getpid());
  const TempFileGuard guard(temp);
  if (!write_new_file(temp, content, error)) {
    ::unlink(temp.c_str());
    return false;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    error = std::strerror(errno);
    ::unlink(temp.c_str());
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
