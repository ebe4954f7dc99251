// Test-only stand-in for gloo/transport/device.h (see README.md): opaque transport types.
#pragma once

namespace gloo::transport {
class Device;
class UnboundBuffer {
 public:
  virtual ~UnboundBuffer() = default;
};
}  // namespace gloo::transport
