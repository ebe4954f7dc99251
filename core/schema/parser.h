// Parses one function-schema string (`[ns::]name[.overload](args) -> returns`) into the model.
#pragma once

#include <optional>
#include <string_view>

#include "model/schema.h"
#include "support/diagnostics.h"

namespace autocastgen::schema {

// Where the schema text sits in its source buffer. When the text was copied out of an escaped
// YAML scalar its offsets no longer match the buffer; then every token maps to `start`.
struct SchemaSource {
  SourceLocation start;
  bool offsets_exact = true;

  [[nodiscard]] SourceLocation at(uint32_t offset) const { return offsets_exact ? start.advanced(offset) : start; }
};

// Returns the schema, or nullopt after reporting exactly one error (the first) to `diags`.
[[nodiscard]] std::optional<model::FunctionSchema> parse_function_schema(std::string_view text,
                                                                         const SchemaSource& source,
                                                                         DiagnosticEngine& diags);

}  // namespace autocastgen::schema
