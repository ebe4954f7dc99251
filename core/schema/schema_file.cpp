// native_functions.yaml entries -> parsed schemas, with duplicate detection across files.
#include "schema/schema_file.h"

#include <fmt/format.h>

#include "schema/parser.h"
#include "support/yaml.h"

namespace autocastgen::schema {

std::optional<model::SchemaSet> load_schema_files(const std::vector<uint32_t>& files, const SourceManager& sources,
                                                  DiagnosticEngine& diags) {
  const size_t errors_before = diags.error_count();
  model::SchemaSet set;
  for (uint32_t file : files) {
    std::optional<YamlNode> root = parse_yaml(sources, file, diags, "YAML", "schema files", kMaxSchemaFileBytes);
    if (!root) continue;
    if (root->is_null()) {
      diags.error(root->location(), "schema file is empty; expected a sequence of entries with 'func:'");
      continue;
    }
    if (!root->is_sequence()) {
      diags.error(root->location(), fmt::format("expected a sequence of entries with 'func:', found {}", root->describe()));
      continue;
    }
    for (const YamlNode& entry : root->items()) {
      if (!entry.is_mapping()) {
        diags.error(entry.location(), fmt::format("expected an entry with 'func:', found {}", entry.describe()));
        continue;
      }
      const YamlNode* func = entry.find("func");
      if (!func) {
        diags.error(entry.location(), "entry has no 'func:' key");
        continue;
      }
      if (!func->is_scalar()) {
        diags.error(func->location(), fmt::format("'func:' must be a schema string, found {}", func->describe()));
        continue;
      }
      const std::optional<SourceLocation> exact = func->exact_text_location();
      const SchemaSource source{exact.value_or(func->location()), exact.has_value()};
      std::optional<model::FunctionSchema> schema = parse_function_schema(func->scalar(), source, diags);
      if (!schema) continue;
      model::SchemaSet::Attributes attributes;
      const YamlNode* structured = entry.find("structured");
      attributes.structured = entry.find("structured_delegate") != nullptr ||
                              (structured && structured->is_scalar() && structured->scalar() == "True");
      const model::OperatorName name = schema->name();
      if (const model::FunctionSchema* earlier = set.add(std::move(*schema), attributes)) {
        const SourceLocation where = name.overload.empty() ? name.location : name.overload_location;
        const size_t length = !source.offsets_exact ? 1 : name.overload.empty() ? name.name.size() : name.overload.size();
        diags.error(where, fmt::format("duplicate schema for '{}'", name.str()), static_cast<uint32_t>(length));
        diags.note(earlier->location(), "first declared here");
      }
    }
  }
  if (diags.error_count() != errors_before) return std::nullopt;
  return set;
}

}  // namespace autocastgen::schema
