// Asking the Python interpreter autocastgen was built with (or $AUTOCASTGEN_PYTHON) where a
// package lives: how the CLI finds the installed torchgen and the importer the torch headers.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace autocastgen {

// The interpreter asked: $AUTOCASTGEN_PYTHON when set, else the one found at build time.
[[nodiscard]] std::string python_interpreter();

// The directory of the installed Python package `package` (`torchgen`, `torch`), found with
// importlib without importing it; nullopt with `why_not` set when the interpreter cannot run or
// does not have it.
[[nodiscard]] std::optional<std::filesystem::path> python_package_dir(std::string_view package, std::string& why_not);

}  // namespace autocastgen
