// Reads one policy YAML file into a PolicyFile, reporting every problem of its shape.
#pragma once

#include <optional>

#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::policy {

// Checks keys, value shapes, policy names, devices, dtypes and op-name syntax; nothing that needs
// schemas. Returns nullopt when any error was reported.
[[nodiscard]] std::optional<PolicyFile> parse_policy_file(const SourceManager& sources, uint32_t file,
                                                          DiagnosticEngine& diags);

// `[ns::]name`, `[ns::]name.overload` or `[ns::]name.*`, split.
struct OpPattern {
  std::string ns;  // empty: aten
  std::string name;
  std::string overload;
  bool all_overloads = false;
};
[[nodiscard]] std::optional<OpPattern> parse_op_pattern(std::string_view text);

}  // namespace autocastgen::policy
