// Two processes on 127.0.0.1 with a gloo group: only one rank sees an inf, both skip and back off.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

// A listening socket on 127.0.0.1 with a port the kernel picked; the TCPStore server takes it
// over (masterListenFd), so nothing listens beyond loopback and no port can be raced for.
int loopback_listener(std::uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GradScalerDistributed, OnlyOneRankSeesAnInfAndBothRanksSkipAndBackOffIdentically) {
  std::uint16_t port = 0;
  const int listen_fd = loopback_listener(&port);
  ASSERT_GE(listen_fd, 0) << "cannot listen on 127.0.0.1";
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = true;
  options.waitWorkers = false;
  options.masterListenFd = listen_fd;
  // The libuv backend takes a listening fd only from 2.8 on; the classic one in every release.
  options.useLibUV = false;
  options.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("autocastgen_scaler_dist_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string exe = AUTOCASTGEN_SCALER_DIST_WORKER;
    const std::string r = std::to_string(rank);
    const std::string p = std::to_string(port);
    const std::string out = (dir / ("rank" + r + ".txt")).string();
    std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>(r.c_str()), const_cast<char*>("2"),
                            const_cast<char*>(p.c_str()), const_cast<char*>(out.c_str()), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ), 0) << exe;
    pids.push_back(pid);
  }
  // Wait for both, killing them if they hang (a broken collective would otherwise block ctest).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::vector<int> status(2, -1);
  for (size_t i = 0; i < pids.size(); ++i) {
    while (true) {
      const pid_t done = ::waitpid(pids[i], &status[i], WNOHANG);
      if (done == pids[i]) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : pids) ::kill(pid, SIGKILL);
        ::waitpid(pids[i], &status[i], 0);
        FAIL() << "worker " << i << " did not finish in 120 s";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0) << "worker " << i << " failed, status " << status[i];
  }
  const std::string rank0 = read_file(dir / "rank0.txt");
  const std::string rank1 = read_file(dir / "rank1.txt");
  std::filesystem::remove_all(dir);

  std::vector<std::string> lines0;
  std::vector<std::string> lines1;
  for (auto [text, lines] : {std::pair{&rank0, &lines0}, std::pair{&rank1, &lines1}}) {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) lines->push_back(line);
  }
  ASSERT_EQ(lines0.size(), 6u) << rank0;
  ASSERT_EQ(lines1.size(), 6u) << rank1;
  // Iteration 0: rank 1 has an inf. Both skip, both back off 1024 -> 512; rank 0's unreduced
  // control scaler steps and keeps 1024, which is what the all-reduce prevents.
  EXPECT_EQ(lines0[0], "iteration 0 stepped 0 scale 512 tracker 0 param 0 0 0 0 control_stepped 1 control_scale 1024");
  EXPECT_EQ(lines1[0], "iteration 0 stepped 0 scale 512 tracker 0 param 0 0 0 0 control_stepped 0 control_scale 512");
  // Iteration 1: clean; both step with the unscaled gradient 1..4 (lr 0.5).
  EXPECT_EQ(lines0[1].substr(0, lines0[1].find(" control")), "iteration 1 stepped 1 scale 512 tracker 1 param -0.5 -1 -1.5 -2");
  // Iteration 2: rank 0 has a NaN; iterations 3-4 clean (growth after 2); 5: rank 1 has a NaN.
  EXPECT_EQ(lines0[2].substr(0, lines0[2].find(" control")), "iteration 2 stepped 0 scale 256 tracker 0 param -0.5 -1 -1.5 -2");
  EXPECT_EQ(lines0[4].substr(0, lines0[4].find(" control")), "iteration 4 stepped 1 scale 512 tracker 0 param -1.5 -3 -4.5 -6");
  EXPECT_EQ(lines0[5].substr(0, lines0[5].find(" control")), "iteration 5 stepped 0 scale 256 tracker 0 param -1.5 -3 -4.5 -6");
  // Every iteration of the reduced scaler is identical on both ranks.
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lines0[i].substr(0, lines0[i].find(" control")), lines1[i].substr(0, lines1[i].find(" control"))) << i;
  }
}

}  // namespace
