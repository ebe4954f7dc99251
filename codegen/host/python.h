// Asking the Python interpreter autocastgen was built with (or $AUTOCASTGEN_PYTHON) where a
// package lives (how the CLI finds the installed torchgen and the importer the torch headers), and
// running a module of the autocastgen package beside the CLI (`advisor`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace autocastgen {

// The interpreter asked: $AUTOCASTGEN_PYTHON when set, else the one found at build time.
[[nodiscard]] std::string python_interpreter();

// The directory of the installed Python package `package` (`torchgen`, `torch`), found with
// importlib without importing it; nullopt with `why_not` set when the interpreter cannot run or
// does not have it.
[[nodiscard]] std::optional<std::filesystem::path> python_package_dir(std::string_view package, std::string& why_not);

// The folder to put on PYTHONPATH for the autocastgen package that belongs to this CLI: `python/`
// beside `bin/` in a build tree (<build>/bin/autocastgen, <build>/python/autocastgen), the folder
// above the package in a pip install (site-packages/autocastgen/bin/autocastgen). `module` is a
// module the package must have (`advisor`); nullopt with `why_not` set when neither place has it.
[[nodiscard]] std::optional<std::filesystem::path> own_python_package_root(std::string_view module, std::string& why_not);

// Runs `<interpreter> -m <module> <args...>` with `pythonpath` in front of $PYTHONPATH, its
// standard streams this process's; returns its exit status (1 with `why_not` set when it could not
// be started, 128 + the signal when one ended it).
[[nodiscard]] int run_python_module(const std::filesystem::path& pythonpath, std::string_view module,
                                    const std::vector<std::string>& args, std::string& why_not);

// A verb the Python package implements (advisor, reporter): runs `-m <module> <args...>` of the package
// beside this CLI (own_python_package_root(`file`)), printing `autocastgen: error: ...` on stderr
// when it cannot; returns the exit status.
[[nodiscard]] int run_own_python_module(std::string_view file, std::string_view module,
                                        const std::vector<std::string>& args);

}  // namespace autocastgen
