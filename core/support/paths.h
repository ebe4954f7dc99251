// How generated files and reports name input files without machine-specific absolute paths.
#pragma once

#include <filesystem>
#include <string>

namespace autocastgen {

// Relative to the working directory when the file is inside it, else just the file name.
[[nodiscard]] std::string display_path(const std::filesystem::path& path);

}  // namespace autocastgen
