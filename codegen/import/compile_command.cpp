// Compile commands made fit for the importer's Clang (Note [precompiled headers in compile commands]).
#include "import/compile_command.h"

#include <string_view>

namespace autocastgen::import {

std::vector<std::string> without_precompiled_headers(const std::vector<std::string>& command) {
  std::vector<std::string> out;
  out.reserve(command.size());
  const auto include_directly = [&out](const std::string& header) {
    out.insert(out.end(), {"-Xclang", "-include", "-Xclang", header});
  };
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string_view arg = command[i];
    const bool has_next = i + 1 < command.size();
    if (arg == "-Xclang" && has_next) {
      // A front-end argument: `-include-pch F` (two -Xclang pairs) is dropped, anything else kept.
      if (command[i + 1] == "-include-pch" && i + 3 < command.size() && command[i + 2] == "-Xclang") {
        i += 3;
        continue;
      }
      out.push_back(command[i]);
      out.push_back(command[++i]);
      continue;
    }
    if ((arg == "-include" || arg == "--include") && has_next) {
      include_directly(command[++i]);
    } else if (arg.starts_with("--include=")) {
      include_directly(std::string(arg.substr(std::string_view("--include=").size())));
    } else if (arg.starts_with("-include") && !arg.starts_with("-include-pch") && arg.size() > std::string_view("-include").size()) {
      include_directly(std::string(arg.substr(std::string_view("-include").size())));
    } else if (arg == "-include-pch" && has_next) {
      ++i;
    } else if (arg == "-fpch-preprocess" || arg == "-fpch-deps") {
      continue;
    } else {
      out.push_back(command[i]);
    }
  }
  return out;
}

}  // namespace autocastgen::import
