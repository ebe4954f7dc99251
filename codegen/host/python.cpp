// Runs `python -c` to ask importlib where a package lives, and `python -m` for the package's modules.
#include "host/python.h"

#include <spawn.h>
#include <sys/wait.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#ifndef AUTOCASTGEN_PYTHON
#define AUTOCASTGEN_PYTHON "python3"
#endif

namespace autocastgen {

std::string python_interpreter() {
  if (const char* env = std::getenv("AUTOCASTGEN_PYTHON"); env && *env) return env;
  return AUTOCASTGEN_PYTHON;
}

std::optional<std::filesystem::path> python_package_dir(std::string_view package, std::string& why_not) {
  const std::string python = python_interpreter();
  const std::string command = fmt::format(
      "'{}' -c \"import importlib.util as u; s = u.find_spec('{}'); "
      "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')\" 2>/dev/null",
      python, package);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    why_not = fmt::format("could not run the Python interpreter {}", python);
    return std::nullopt;
  }
  std::array<char, 4096> buffer{};
  std::string out;
  while (fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.empty()) {
    why_not = fmt::format("{} cannot find the Python package '{}' (is PyTorch installed? run scripts/setup)", python, package);
    return std::nullopt;
  }
  return std::filesystem::path(out);
}

std::optional<std::filesystem::path> own_python_package_root(std::string_view module, std::string& why_not) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    why_not = fmt::format("cannot tell where this program is (/proc/self/exe: {})", ec.message());
    return std::nullopt;
  }
  const fs::path file = fs::path("autocastgen") / fmt::format("{}.py", module);
  const fs::path bin = exe.parent_path();
  const std::array<fs::path, 2> roots = {bin.parent_path() / "python", bin.parent_path().parent_path()};
  for (const fs::path& root : roots) {
    if (fs::is_regular_file(root / file, ec)) return root;
  }
  why_not = fmt::format("the autocastgen Python package is not beside this program ({} nor {} has {})",
                        roots[0].string(), roots[1].string(), file.string());
  return std::nullopt;
}

extern "C" char** environ;

int run_python_module(const std::filesystem::path& pythonpath, std::string_view module,
                      const std::vector<std::string>& args, std::string& why_not) {
  const std::string python = python_interpreter();
  std::vector<std::string> argv = {python, "-m", std::string(module)};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  std::string path = pythonpath.string();
  for (char** entry = environ; *entry; ++entry) {
    if (std::strncmp(*entry, "PYTHONPATH=", 11) == 0) {
      if ((*entry)[11] != '\0') path += fmt::format(":{}", *entry + 11);
    } else {
      env.emplace_back(*entry);
    }
  }
  env.push_back("PYTHONPATH=" + path);
  std::vector<char*> argv_c, env_c;
  for (std::string& arg : argv) argv_c.push_back(arg.data());
  for (std::string& var : env) env_c.push_back(var.data());
  argv_c.push_back(nullptr);
  env_c.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = 0;
  if (const int error = posix_spawnp(&child, python.c_str(), nullptr, nullptr, argv_c.data(), env_c.data())) {
    why_not = fmt::format("could not run the Python interpreter {}: {}", python, std::strerror(error));
    return 1;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      why_not = fmt::format("waiting for {} failed: {}", python, std::strerror(errno));
      return 1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

int run_own_python_module(std::string_view file, std::string_view module, const std::vector<std::string>& args) {
  std::string why_not;
  const std::optional<std::filesystem::path> root = own_python_package_root(file, why_not);
  const int status = root ? run_python_module(*root, module, args, why_not) : 1;
  if (!why_not.empty()) std::fprintf(stderr, "autocastgen: error: %s\n", why_not.c_str());
  return status;
}

}  // namespace autocastgen
