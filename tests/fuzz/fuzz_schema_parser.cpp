// libFuzzer entry point: one schema string. Either exactly one in-bounds error, or a schema whose
// canonical text is a fixed point (parses again, prints itself, keeps kind and types).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "model/schema_set.h"
#include "schema/parser.h"

namespace {

using namespace autocastgen;

struct Result {
  std::optional<model::FunctionSchema> schema;
  std::string diagnostics;
  size_t errors = 0;
  std::optional<Diagnostic> first;
};

Result parse(const std::string& text) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("fuzz", text);
  Result r;
  r.schema = schema::parse_function_schema(text, schema::SchemaSource{sm.start_of(file)}, diags);
  r.diagnostics = out.str();
  r.errors = diags.error_count();
  if (!diags.diagnostics().empty()) r.first = diags.diagnostics().front();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Result r = parse(text);
  if (!r.schema) {
    FUZZ_CHECK(r.errors == 1, r.diagnostics);
    FUZZ_CHECK(r.first->location.offset <= text.size(), r.diagnostics);
    FUZZ_CHECK(r.first->location.offset + r.first->length <= text.size() + 1, r.diagnostics);
    return 0;
  }
  FUZZ_CHECK(r.errors == 0, r.diagnostics);
  const model::FunctionSchema& s = *r.schema;
  const std::string canonical = s.str();
  const Result again = parse(canonical);
  FUZZ_CHECK(again.schema.has_value(), canonical + "\n" + again.diagnostics);
  FUZZ_CHECK(again.schema->str() == canonical, canonical + "\n" + again.schema->str());
  FUZZ_CHECK(again.schema->kind() == s.kind(), canonical);
  FUZZ_CHECK(again.schema->arguments().size() == s.arguments().size(), canonical);
  for (size_t i = 0; i < s.arguments().size(); ++i) {
    const model::Argument& a = s.arguments()[i];
    const model::Argument& b = again.schema->arguments()[i];
    FUZZ_CHECK(a.type == b.type && a.annotation == b.annotation && a.name == b.name && a.default_value == b.default_value &&
                   a.kwarg_only == b.kwarg_only && a.out == b.out,
               canonical);
    FUZZ_CHECK(a.type.str() == b.type.str(), canonical);
  }
  FUZZ_CHECK(again.schema->returns().size() == s.returns().size(), canonical);
  (void)model::is_autocast_eligible(s);
  return 0;
}
