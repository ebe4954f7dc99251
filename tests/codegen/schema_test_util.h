// Test helper: parse one schema string from its own buffer and keep the diagnostics it printed.
#pragma once

#include <optional>
#include <sstream>
#include <string>

#include "model/schema.h"
#include "schema/parser.h"
#include "support/diagnostics.h"

namespace autocastgen::testing_support {

struct ParsedSchema {
  std::optional<model::FunctionSchema> schema;
  std::string diagnostics;  // everything printed, `<schema>:line:col: ...` with source line and caret
  size_t errors = 0;

  // The first diagnostic's first line without the buffer name: `1:col: error: message`.
  [[nodiscard]] std::string first_line() const {
    const size_t colon = diagnostics.find(':');
    const size_t end = diagnostics.find('\n');
    if (colon == std::string::npos) return diagnostics;
    return diagnostics.substr(colon + 1, end - colon - 1);
  }
};

inline ParsedSchema parse_schema(const std::string& text) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("<schema>", text);
  ParsedSchema parsed;
  parsed.schema = schema::parse_function_schema(text, schema::SchemaSource{sm.start_of(file)}, diags);
  parsed.diagnostics = out.str();
  parsed.errors = diags.error_count();
  return parsed;
}

}  // namespace autocastgen::testing_support
