// Invariant checks for the fuzz entry points: print what broke, then abort so libFuzzer keeps the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(condition, what)                                                       \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      std::fprintf(stderr, "fuzz invariant failed: %s\n  %s\n", #condition,               \
                   std::string(what).c_str());                                            \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
