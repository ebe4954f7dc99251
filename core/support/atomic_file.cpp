// Whole-or-nothing file writes that survive write faults and interruptions.
#include "support/atomic_file.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace autocastgen {

namespace fs = std::filesystem;

// Note [writes under faults]
// A write can fail part-way: RLIMIT_FSIZE (`ulimit -f`) sends SIGXFSZ, whose default action ends
// the process and left the temporary behind (issue 19; a program writing statistics at exit lost
// them, issue 47); a full disk fails with ENOSPC; the user interrupts. So every file is written to
// a temporary in its own folder and renamed over the target, and while the temporary exists:
//  - SIGXFSZ is ignored: the write fails with EFBIG instead, reported as "File too large";
//  - SIGINT, SIGTERM and SIGHUP, where their action is still the default (the process would end),
//    unlink the temporary (its name sits in a fixed buffer: nothing is allocated in the handler),
//    then take their default action, so the exit status still names the signal. A handler someone
//    installed (Python's KeyboardInterrupt) is left alone: the write then finishes;
//  - any failure (open, write, fsync, close, rename) removes the temporary and leaves the target
//    as it was: only rename(2) of a complete temporary replaces it.
// A record (WriteOptions::durable) is also fsync'ed before the rename, and its folder after it, so a
// machine that stops right after the write keeps the old file or the new one, never a cut one.
// SIGKILL cannot be caught: it can leave a temporary behind, never a half-written target.
// Writes take one process-wide lock: the signal dispositions and the handler's buffer are per
// process, and two threads writing one file would otherwise share a temporary.
namespace {

WriteFunction g_atomic_write = nullptr;
char g_atomic_temp[4096];
volatile sig_atomic_t g_atomic_temp_set = 0;
constexpr int kAtomicCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::mutex& atomic_write_mutex() {
  static std::mutex* const mutex = new std::mutex;  // never destroyed: statistics are written at exit
  return *mutex;
}

extern "C" void atomic_remove_temp_and_reraise(int signal) {
  if (g_atomic_temp_set) ::unlink(g_atomic_temp);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// The signal dispositions of Note [writes under faults], for one temporary's lifetime.
class TempFileSignals {
 public:
  explicit TempFileSignals(const std::string& temp) {
    g_atomic_temp_set = 0;
    std::snprintf(g_atomic_temp, sizeof g_atomic_temp, "%s", temp.c_str());
    g_atomic_temp_set = temp.size() < sizeof g_atomic_temp;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGXFSZ, &ignore, &old_xfsz_);
    struct sigaction cleanup {};
    cleanup.sa_handler = atomic_remove_temp_and_reraise;
    ::sigemptyset(&cleanup.sa_mask);
    for (size_t i = 0; i < std::size(kAtomicCleanupSignals); ++i) {
      ::sigaction(kAtomicCleanupSignals[i], nullptr, &old_[i]);
      replaced_[i] = (old_[i].sa_flags & SA_SIGINFO) == 0 && old_[i].sa_handler == SIG_DFL;
      if (replaced_[i]) ::sigaction(kAtomicCleanupSignals[i], &cleanup, nullptr);
    }
  }
  ~TempFileSignals() {
    for (size_t i = 0; i < std::size(kAtomicCleanupSignals); ++i)
      if (replaced_[i]) ::sigaction(kAtomicCleanupSignals[i], &old_[i], nullptr);
    ::sigaction(SIGXFSZ, &old_xfsz_, nullptr);
    g_atomic_temp_set = 0;
  }
  TempFileSignals(const TempFileSignals&) = delete;
  TempFileSignals& operator=(const TempFileSignals&) = delete;

 private:
  struct sigaction old_xfsz_ {};
  struct sigaction old_[std::size(kAtomicCleanupSignals)] {};
  bool replaced_[std::size(kAtomicCleanupSignals)] = {};
};

// Writes all of `content` to a new file `temp` (with `mode` when the target had one); false with
// the system's message on failure.
[[nodiscard]] bool write_new_file(const std::string& temp, std::string_view content, bool durable,
                                  std::optional<mode_t> mode, std::string& error) {
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  const auto fail = [&](int number) {
    error = std::strerror(number);
    ::close(fd);
    return false;
  };
  if (mode && ::fchmod(fd, *mode) != 0) return fail(errno);
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = g_atomic_write ? g_atomic_write(fd, data, left) : ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(n < 0 ? errno : EIO);
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) return fail(errno);
  if (::close(fd) != 0) {
    error = std::strerror(errno);
    return false;
  }
  return true;
}

void sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // some file systems refuse it on folders: the rename has happened either way
  ::close(fd);
}

}  // namespace

bool file_holds(const fs::path& path, std::string_view content) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);  // first: a huge file is not read to compare
  if (ec || size != content.size()) return false;
  std::ifstream in(path, std::ios::binary);
  std::string existing(content.size(), '\0');
  return in.read(existing.data(), static_cast<std::streamsize>(existing.size())) && existing == content;
}

void set_write_function_for_testing(WriteFunction write) { g_atomic_write = write; }

bool write_file_atomically(const fs::path& path, std::string_view content, std::string& error, WriteOptions options) {
  std::error_code ec;
  if (options.create_folders && path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  if (ec) {
    error = ec.message();
    return false;
  }
  std::optional<mode_t> mode;
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;
  const bool durable = options.durable;
  const std::lock_guard<std::mutex> lock(atomic_write_mutex());
  const std::string temp = path.string() + ".tmp" + std::to_string(::getpid());
  const TempFileSignals signals(temp);
  if (!write_new_file(temp, content, durable, mode, error)) {
    ::unlink(temp.c_str());
    return false;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    error = std::strerror(errno);
    ::unlink(temp.c_str());
    return false;
  }
  if (durable) sync_folder(path.parent_path());
  return true;
}

bool write_if_changed(const fs::path& path, std::string_view content, bool& changed, std::string& error,
                      WriteOptions options) {
  changed = false;
  if (file_holds(path, content)) return true;
  if (!write_file_atomically(path, content, error, options)) return false;
  changed = true;
  return true;
}

}  // namespace autocastgen
