// Locating and loading the importer plugin with dlopen.
#include "import/plugin.h"

#include <dlfcn.h>

#include <filesystem>

#include <fmt/format.h>

namespace autocastgen::import {

const ImporterApi* load_importer(DiagnosticEngine& diags) {
  static const ImporterApi* api = nullptr;
  if (api) return api;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path plugin = exe.parent_path().parent_path() / "lib" / "libautocastgen_import.so";
  void* handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    diags.error({}, fmt::format("cannot load the importer plugin: {}", dlerror()));
    return nullptr;
  }
  auto entry = reinterpret_cast<decltype(&autocastgen_importer_api)>(dlsym(handle, "autocastgen_importer_api"));
  if (!entry) {
    diags.error({}, fmt::format("'{}' is not an autocastgen importer plugin", plugin.string()));
    return nullptr;
  }
  api = entry();
  return api;
}

}  // namespace autocastgen::import
