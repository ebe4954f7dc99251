// Runs `python -c` to ask importlib where a package lives.
#include "host/python.h"

#include <array>
#include <cstdio>
#include <cstdlib>

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

}  // namespace autocastgen
