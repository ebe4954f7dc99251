// libFuzzer entry point: a whole schema file through load_schema_files, and the YAML layer's
// invariant that a tree comes back exactly when no error was reported.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "schema/schema_file.h"
#include "support/yaml.h"

namespace {

using namespace autocastgen;

// parse_yaml gives a tree exactly when it reported no error.
void check_yaml(const std::string& text) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("fuzz.yaml", text);
  const std::optional<YamlNode> root = parse_yaml(sm, file, diags);
  FUZZ_CHECK(root.has_value() == (diags.error_count() == 0), out.str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    SourceManager sm;
    std::ostringstream out;
    DiagnosticEngine diags(sm, out);
    const uint32_t file = sm.add_buffer("fuzz.yaml", text);
    const std::optional<model::SchemaSet> set = schema::load_schema_files({file}, sm, diags);
    FUZZ_CHECK(set.has_value() == !diags.has_errors(), out.str());
    for (const Diagnostic& d : diags.diagnostics()) {
      FUZZ_CHECK(!d.location.valid() || d.location.offset <= text.size(), out.str());
      FUZZ_CHECK(d.length >= 1, out.str());
    }
    if (set) {
      for (const model::FunctionSchema& s : set->schemas()) {
        FUZZ_CHECK(set->find(s.name().ns, s.name().unqualified()) == &s, s.str());
        FUZZ_CHECK(!set->overloads(s.name().ns, s.name().name).empty(), s.str());
      }
    }
  }
  check_yaml(text);
  return 0;
}
