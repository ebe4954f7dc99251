// libFuzzer entry point: a whole schema file through load_schema_files; also checks that the
// chunked YAML path (forced on, 2 and 3 chunks) gives the whole-file tree and diagnostics.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "schema/schema_file.h"
#include "support/yaml.h"
#include "yaml_tree_diff.h"

namespace {

using namespace autocastgen;

struct YamlResult {
  std::optional<YamlNode> root;
  std::string diagnostics;
  size_t chunks = 0;
};

YamlResult parse(const std::string& text, YamlParseOptions options) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("fuzz.yaml", text);
  YamlResult r;
  options.chunks_used = &r.chunks;
  r.root = parse_yaml(sm, file, diags, options);
  r.diagnostics = out.str();
  FUZZ_CHECK(r.root.has_value() == (diags.error_count() == 0), r.diagnostics);
  return r;
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
  // When a split was used, the tree and diagnostics must be the whole-file ones. (When it was
  // not, the result is a whole-file parse already.)
  std::optional<YamlResult> whole;
  for (unsigned threads : {2u, 3u}) {
    const YamlResult chunked = parse(text, {.threads = threads, .min_parallel_bytes = 0});
    if (chunked.chunks == 1) continue;
    FUZZ_CHECK(chunked.chunks <= threads, std::to_string(chunked.chunks));
    if (!whole) whole = parse(text, {.threads = 1});
    FUZZ_CHECK(chunked.diagnostics == whole->diagnostics, whole->diagnostics + "\nvs\n" + chunked.diagnostics);
    FUZZ_CHECK(whole->root.has_value() == chunked.root.has_value(), whole->diagnostics);
    if (whole->root) {
      const std::string diff = testing_support::yaml_tree_diff(*whole->root, *chunked.root);
      FUZZ_CHECK(diff.empty(), diff);
    }
  }
  return 0;
}
