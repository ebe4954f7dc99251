// Loads libraries of the wheel as `import autocastgen` does, every symbol bound at once
// (RTLD_NOW: a symbol or symbol version the system lacks fails here, not at the first call), and
// calls into the runtime: its statistics snapshot, JSON written by the runtime's own code.
// tests/pip/test_pip_debian11.py builds it with the wheel's link options and runs it in a Debian 11
// root (Note [linking for manylinux_2_31] in scripts/torch-releases); built with
// -D_GLIBCXX_USE_CXX11_ABI=0 for a runtime of the old string ABI (torch 2.4-2.6).
#include <dlfcn.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIBRARY...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    if (dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      std::fprintf(stderr, "load_runtime: %s\n", dlerror());
      return 1;
    }
    std::printf("loaded %s\n", argv[i]);
  }
  // autocastgen::stats::snapshot_json(), as each string ABI names it.
#if _GLIBCXX_USE_CXX11_ABI
  const char* name = "_ZN11autocastgen5stats13snapshot_jsonB5cxx11Ev";
#else
  const char* name = "_ZN11autocastgen5stats13snapshot_jsonEv";
#endif
  auto snapshot = reinterpret_cast<std::string (*)()>(dlsym(RTLD_DEFAULT, name));
  if (snapshot == nullptr) {
    std::fprintf(stderr, "load_runtime: %s\n", dlerror());
    return 1;
  }
  std::printf("%s\n", snapshot().c_str());
  return 0;
}
