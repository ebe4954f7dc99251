// The bytes of a YAML file checked before yaml-cpp reads them (Note [bytes YAML cannot hold] in
// yaml_text.cpp); parse_yaml's first steps.
#pragma once

#include <cstdint>
#include <string_view>

#include "support/diagnostics.h"

namespace autocastgen {

// Reports a UTF-16 or UTF-32 file, bytes that are not UTF-8 and control characters YAML forbids
// (at most 10 of them, then a count); false when it reported anything. `language` and `files`
// as parse_yaml takes them.
[[nodiscard]] bool check_bytes(uint32_t file, std::string_view text, DiagnosticEngine& diags, std::string_view language,
                               std::string_view files);

// Reports every line indented with a tab.
void report_tab_indentation(uint32_t file, std::string_view text, DiagnosticEngine& diags);

}  // namespace autocastgen
