// libFuzzer entry point: a policy file through the loader and the resolver, against the mini
// schema fixture; checks the invariants a resolved policy promises.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "fuzz_check.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "schema/schema_file.h"

namespace {

using namespace autocastgen;

struct Fixture {
  SourceManager sources;
  std::optional<model::SchemaSet> schemas;
  Fixture() {
    std::ostringstream out;
    DiagnosticEngine diags(sources, out);
    std::vector<uint32_t> files;
    std::string error;
    for (const char* name : {"mini_native_functions.yaml", "custom_ops.yaml"}) {
      auto file = sources.add_file(std::string(AUTOCASTGEN_TEST_DATA) + "/schemas/" + name, error);
      FUZZ_CHECK(file.has_value(), error);
      files.push_back(*file);
    }
    schemas = schema::load_schema_files(files, sources, diags);
    FUZZ_CHECK(schemas.has_value(), out.str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  const std::string text(reinterpret_cast<const char*>(data), size);
  SourceManager sources;
  std::ostringstream out;
  DiagnosticEngine diags(sources, out);
  const uint32_t file = sources.add_buffer("fuzz.yaml", text);
  std::optional<policy::PolicyFile> parsed = policy::parse_policy_file(sources, file, diags);
  FUZZ_CHECK(parsed.has_value() == !diags.has_errors(), out.str());
  std::optional<policy::ResolvedPolicy> resolved;
  if (parsed) {
    // A fixed target release, so release gates resolve too (Note [release gates]).
    resolved = policy::resolve_policy({*parsed}, *fixture.schemas, diags, {model::TorchVersion(2, 9)});
    FUZZ_CHECK(resolved.has_value() == !diags.has_errors(), out.str());
  }
  for (const Diagnostic& d : diags.diagnostics()) {
    // Policy diagnostics point into the policy; notes may point at the fixture's entries.
    FUZZ_CHECK(!d.location.valid() || d.location.file != file || d.location.offset <= text.size(), out.str());
    FUZZ_CHECK(d.length >= 1, out.str());
  }
  if (!resolved) return 0;
  std::set<const model::FunctionSchema*> seen;
  size_t counted = 0;
  for (policy::PolicyKind kind : policy::kAllPolicies) counted += resolved->count(kind);
  FUZZ_CHECK(counted == resolved->entries.size(), out.str());
  const auto& entries = resolved->entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    const policy::ResolvedEntry& e = entries[i];
    // Note [precision rules]: an overload's entries are adjacent, conditional, and no call
    // matches two of them; what a rule names is the schema's.
    const bool continues = i > 0 && entries[i - 1].schema == e.schema;
    FUZZ_CHECK(continues || seen.insert(e.schema).second, "listed apart: " + e.schema->str());
    if (continues) {
      for (size_t j = i; j-- > 0 && entries[j].schema == e.schema;) {
        // Note [precision by place]: scoped entries first; a plain entry may follow only them.
        const policy::Rule& before = entries[j].rule;
        FUZZ_CHECK(before.conditional() && (e.rule.conditional() || !before.modules.empty()),
                   "an unconditional entry shares: " + e.schema->str());
        FUZZ_CHECK(e.rule.modules.empty() || !before.modules.empty(), "a scoped entry after an unscoped one: " + e.schema->str());
        FUZZ_CHECK(!policy::rules_overlap(e.rule, before), "overlapping entries: " + e.schema->str());
      }
    }
    for (const auto* conditions : {&e.rule.when, &e.rule.unless})
      for (const policy::ArgCondition& c : *conditions) {
        FUZZ_CHECK(c.index < e.schema->arguments().size() && e.schema->arguments()[c.index].name == c.arg, c.arg);
        FUZZ_CHECK(!e.schema->arguments()[c.index].type.is_tensor_like() && !c.values.empty(), c.arg);
      }
    for (const policy::ArgCastRule& a : e.rule.args)
      FUZZ_CHECK(a.index < e.schema->arguments().size() && e.schema->arguments()[a.index].type.is_tensor_like(), a.arg);
    for (const std::string& dtype : e.rule.dtypes)
      FUZZ_CHECK(std::find(resolved->lower_precision.begin(), resolved->lower_precision.end(), dtype) != resolved->lower_precision.end(),
                 dtype);
    FUZZ_CHECK(model::is_autocast_eligible(*e.schema), "ineligible: " + e.schema->str());
    if (e.policy == policy::PolicyKind::fp32_set_opt_dtype)
      FUZZ_CHECK(e.schema->find_argument("dtype") != nullptr, e.schema->str());
    FUZZ_CHECK((e.policy == policy::PolicyKind::fp32_append_dtype) == (e.redispatch != nullptr), e.schema->str());
    if (e.policy == policy::PolicyKind::banned) FUZZ_CHECK(!e.message.empty(), e.schema->str());
  }
  std::set<std::string> patterns;
  for (const policy::ModuleSection& section : resolved->sections) {
    FUZZ_CHECK(!section.pattern.empty() && patterns.insert(section.pattern).second, section.pattern);
    FUZZ_CHECK(section.kind != policy::SectionKind::dtype ||
                   std::find(resolved->lower_precision.begin(), resolved->lower_precision.end(), section.dtype) !=
                       resolved->lower_precision.end(),
               section.dtype);
  }
    FUZZ_CHECK(!resolved->device.empty() && !resolved->dispatch_key.empty() && !resolved->lower_precision.empty(), out.str());
  return 0;
}
