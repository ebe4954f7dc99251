// The output writer and the atomic-write helper under faults (issues 19 and 47; Note [writes under
// faults] in support/atomic_file.cpp): an injected ENOSPC, a failing rename, a real file-size limit
// (SIGXFSZ) and SIGINT/SIGTERM mid-write, each leaving no temporary file and the previous output
// untouched; a SIGINT handler of the process's own is left alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emit/output_writer.h"
#include "support/atomic_file.h"

namespace autocastgen::emit {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Files in `dir` whose name holds ".tmp" (the writer's temporaries).
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().filename().string().find(".tmp") != std::string::npos) found.push_back(entry.path().string());
  return found;
}

class OutputFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autocastgen_faults_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "out.cpp") << "previous\n";
  }
  void TearDown() override {
    set_write_function_for_testing(nullptr);
    fs::remove_all(dir_);
  }
  // Runs `body` in a child process; returns its wait status.
  template <class Body>
  static int in_child(Body body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }
  fs::path dir_;
  const std::string content_ = std::string(100'000, 'x');
};

// Writes part of the data, then fails as a full disk does.
ssize_t half_then_enospc(int fd, const void* data, size_t size) {
  static bool wrote = false;
  if (!wrote) {
    wrote = true;
    return ::write(fd, data, size / 2);
  }
  wrote = false;
  errno = ENOSPC;
  return -1;
}

TEST_F(OutputFaults, FullDiskIsReportedAndLeavesNothingBehind) {
  set_write_function_for_testing(half_then_enospc);
  SourceManager sources;
  std::ostringstream out;
  DiagnosticEngine diags(sources, out);
  OutputWriter writer(dir_);
  ASSERT_TRUE(writer.add("out.cpp", content_, diags));
  EXPECT_TRUE(writer.write(diags).empty());
  EXPECT_NE(out.str().find("error: cannot write '" + (dir_ / "out.cpp").string() + "': No space left on device"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(read(dir_ / "out.cpp"), "previous\n");
  EXPECT_EQ(temporaries(dir_), std::vector<std::string>{});
}

TEST_F(OutputFaults, FailedRenameIsReportedAndLeavesNothingBehind) {
  fs::create_directories(dir_ / "busy.cpp" / "inside");  // rename(2) cannot replace a non-empty directory
  bool changed = true;
  std::string error;
  EXPECT_FALSE(write_if_changed(dir_ / "busy.cpp", content_, changed, error));
  EXPECT_FALSE(changed);
  EXPECT_EQ(error, "Is a directory");
  EXPECT_TRUE(fs::is_directory(dir_ / "busy.cpp" / "inside"));
  EXPECT_EQ(temporaries(dir_), std::vector<std::string>{});
}

// A real file-size limit: the process gets SIGXFSZ, which used to kill it (exit 153).
TEST_F(OutputFaults, FileSizeLimitIsReportedNotFatal) {
  const int status = in_child([&] {
    const rlimit limit{50 * 1024, 50 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    bool changed = true;
    std::string error;
    if (write_if_changed(dir_ / "out.cpp", content_, changed, error)) return 11;
    return error == "File too large" ? 0 : 12;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: the write succeeded, 12: another message";
  EXPECT_EQ(read(dir_ / "out.cpp"), "previous\n");
  EXPECT_EQ(temporaries(dir_), std::vector<std::string>{});
  // SIGXFSZ is back to what it was after the write.
  struct sigaction now {};
  ::sigaction(SIGXFSZ, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// The signal arrives while the temporary is half written.
int g_signal = 0;
ssize_t half_then_signal(int fd, const void* data, size_t size) {
  const ssize_t n = ::write(fd, data, size / 2);
  ::raise(g_signal);
  return n;
}

TEST_F(OutputFaults, InterruptRemovesTheTemporaryAndEndsWithTheSignal) {
  for (int signal : {SIGINT, SIGTERM}) {
    g_signal = signal;
    const int status = in_child([&] {
      set_write_function_for_testing(half_then_signal);
      bool changed = false;
      std::string error;
      (void)write_if_changed(dir_ / "out.cpp", content_, changed, error);
      return 20;  // not reached
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), signal);
    EXPECT_EQ(read(dir_ / "out.cpp"), "previous\n");
    EXPECT_EQ(temporaries(dir_), std::vector<std::string>{}) << "signal " << signal;
  }
}

// A process that handles SIGINT itself (Python: KeyboardInterrupt) keeps its handler: the signal
// does not end the write, which finishes and replaces the file.
volatile sig_atomic_t g_handled = 0;
extern "C" void note_signal(int) { g_handled = 1; }
ssize_t half_then_sigint_once(int fd, const void* data, size_t size) {
  if (g_handled) return ::write(fd, data, size);
  const ssize_t n = ::write(fd, data, size / 2);
  ::raise(SIGINT);
  return n;
}

TEST_F(OutputFaults, AHandlerOfTheProcessIsLeftAlone) {
  const int status = in_child([&] {
    struct sigaction own {};
    own.sa_handler = note_signal;
    ::sigemptyset(&own.sa_mask);
    ::sigaction(SIGINT, &own, nullptr);
    set_write_function_for_testing(half_then_sigint_once);
    bool changed = false;
    std::string error;
    if (!write_if_changed(dir_ / "out.cpp", content_, changed, error)) return 30;
    struct sigaction now {};
    ::sigaction(SIGINT, nullptr, &now);
    return g_handled && changed && now.sa_handler == note_signal ? 0 : 31;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "30: the write failed, 31: the handler was not called or not kept";
  EXPECT_EQ(read(dir_ / "out.cpp"), content_);
  EXPECT_EQ(temporaries(dir_), std::vector<std::string>{});
}

// Threads writing one record at once leave one whole file: one of the contents, nothing mixed.
TEST_F(OutputFaults, ThreadsWritingOneRecordLeaveOneWholeFile) {
  std::vector<std::string> contents;
  for (char c : std::string("abcdefgh")) contents.push_back(std::string(20'000, c) + "\n");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (const std::string& content : contents)
    threads.emplace_back([&, content] {
      for (int i = 0; i < 4; ++i) {
        std::string error;
        if (!write_file_atomically(dir_ / "stats.json", content, error, {.durable = true})) ++failures;
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_NE(std::find(contents.begin(), contents.end(), read(dir_ / "stats.json")), contents.end());
  EXPECT_EQ(temporaries(dir_), std::vector<std::string>{});
}

TEST_F(OutputFaults, ReplacingAFileKeepsItsMode) {
  fs::permissions(dir_ / "out.cpp", fs::perms::owner_read | fs::perms::owner_write);
  std::string error;
  ASSERT_TRUE(write_file_atomically(dir_ / "out.cpp", "new\n", error)) << error;
  EXPECT_EQ(read(dir_ / "out.cpp"), "new\n");
  EXPECT_EQ(fs::status(dir_ / "out.cpp").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
}

}  // namespace
}  // namespace autocastgen::emit
