// display_path: deterministic names for input files.
#include "support/paths.h"

namespace autocastgen {

namespace fs = std::filesystem;

std::string display_path(const fs::path& path) {
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(path, ec);
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const fs::path relative = absolute.lexically_relative(cwd);
    if (!relative.empty() && *relative.begin() != "..") return relative.generic_string();
  }
  return path.filename().string();
}

}  // namespace autocastgen
