// A build's compile command made fit for the importer's Clang: what GCC-only precompiled headers
// put on it is replaced (Note [precompiled headers in compile commands]). Plain strings, no Clang.
#pragma once

#include <string>
#include <vector>

namespace autocastgen::import {

// Note [precompiled headers in compile commands]
// CMake's target_precompile_headers puts `-Winvalid-pch -include <dir>/cmake_pch.hxx` on each
// file's GCC command and leaves `cmake_pch.hxx.gch` beside it. Given `-include X`, Clang's driver
// looks for `X.pch` and `X.gch` and, finding one, reads it as its own precompiled header: a GCC
// `.gch` (or a PCH of another Clang) is "not a PCH file", and the file cannot be read at all.
// The header itself is ordinary C++ (it includes the headers the build precompiled), so every
// `-include X` (also `-includeX`, `--include=X`, `--include X`) goes to Clang's front end
// directly (`-Xclang -include -Xclang X`), which includes X as written and looks for no
// precompiled copy; and what names a precompiled file outright (`-include-pch F`, CMake's
// `-Xclang -include-pch -Xclang F` for Clang builds, GCC's `-fpch-preprocess`, `-fpch-deps`) is
// dropped: its header comes from the `-include` beside it. The file compiles from source as
// GCC's would have without the precompiled copy, which `-Winvalid-pch` builds guarantee to be
// the same.
[[nodiscard]] std::vector<std::string> without_precompiled_headers(const std::vector<std::string>& command);

}  // namespace autocastgen::import
