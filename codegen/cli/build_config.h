// What the build configured into the CLI: whether the importer plugin was built, whether this is the
// pip package's CLI, and the installed PyTorch's native_functions.yaml (build_config.cpp).
#pragma once

namespace autocastgen::cli {

// Note [one CLI for every build]
// These differ between the builds of one clone (the default preset, the wheel's torch-free part,
// pip's), so they are compiled in build_config.cpp alone, outside the CLI's one translation unit
// (Note [one translation unit]): every other byte of the CLI compiles the same in each of them, and
// ccache serves the wheel's and pip's CLI what build/ compiled.
extern const bool kHaveImporter;              // the Clang importer plugin (libautocastgen_import.so) was built
extern const bool kPipPackage;                // the pip package's or the wheel's CLI, which never has it
extern const char* const kDefaultNativeFunctions;  // the build's torch's native_functions.yaml, or ""

}  // namespace autocastgen::cli
