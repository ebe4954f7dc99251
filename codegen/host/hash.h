// Content hashes for @generated headers and manifests (SHA-256, so `sha256sum` can confirm them).
#pragma once

#include <string>
#include <string_view>

namespace autocastgen {

[[nodiscard]] std::string sha256_hex(std::string_view data);

}  // namespace autocastgen
