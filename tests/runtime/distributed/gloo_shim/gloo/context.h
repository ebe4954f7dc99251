// Test-only stand-in for gloo/context.h (see README.md): declares what ProcessGroupGloo.hpp names.
#pragma once

#include <chrono>

namespace gloo {
class Context {
 public:
  // Named by an inline ProcessGroupGloo member that the test never calls; not defined here.
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo
