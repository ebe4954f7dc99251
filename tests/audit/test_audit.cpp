// Audit library tests: the located JSON reader, manifests, families, coverage, diffs, policy writer,
// compile commands made fit for the importer.
#include <gtest/gtest.h>

#include <sstream>

#include "audit/coverage.h"
#include "audit/diff.h"
#include "audit/families.h"
#include "audit/inputs.h"
#include "import/cast_values.h"
#include "import/compile_command.h"
#include "import/policy_writer.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "schema/schema_file.h"

namespace autocastgen::audit {
namespace {

using policy::PolicyKind;

// The mini schema fixture plus in-memory policies and manifests.
class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    std::vector<uint32_t> files;
    for (const char* name : {"mini_native_functions.yaml", "custom_ops.yaml"})
      files.push_back(*sources_.add_file(std::string(AUTOCASTGEN_TEST_DATA) + "/schemas/" + name, error));
    schemas_ = schema::load_schema_files(files, sources_, diags_);
    ASSERT_TRUE(schemas_.has_value()) << out_.str();
  }

  std::optional<policy::ResolvedPolicy> policy(const std::string& text, const std::string& name = "p.yaml") {
    const uint32_t file = sources_.add_buffer(name, text);
    std::optional<policy::PolicyFile> parsed = policy::parse_policy_file(sources_, file, diags_);
    if (!parsed) return std::nullopt;
    std::optional<policy::ResolvedPolicy> resolved = policy::resolve_policy({*parsed}, *schemas_, diags_);
    if (!resolved) return std::nullopt;
    resolved->name = name;
    return resolved;
  }

  std::optional<policy::ResolvedPolicy> manifest(const std::string& text) {
    return read_manifest(sources_.add_buffer("m.json", text), "m.json", *schemas_, sources_, diags_);
  }

  // The first line of the diagnostics, e.g. `t.json:1:5: error: ...`.
  std::string first_diagnostic() const {
    const std::string text = out_.str();
    return text.substr(0, text.find('\n'));
  }

  std::ostringstream out_;
  SourceManager sources_;
  DiagnosticEngine diags_{sources_, out_};
  std::optional<model::SchemaSet> schemas_;
};

TEST_F(AuditTest, InputKinds) {
  EXPECT_EQ(input_kind("a/b.yaml"), policy::PolicySource::policy_file);
  EXPECT_EQ(input_kind("b.YML"), policy::PolicySource::policy_file);
  EXPECT_EQ(input_kind("x.manifest.json"), policy::PolicySource::manifest);
  EXPECT_EQ(input_kind("k.cpp"), policy::PolicySource::cpp);
  EXPECT_EQ(input_kind("k.cu"), policy::PolicySource::cpp);
  EXPECT_EQ(input_kind("notes.txt"), std::nullopt);
  EXPECT_EQ(input_kind("Makefile"), std::nullopt);
}

TEST_F(AuditTest, ManifestReadsLikeThePolicy) {
  const auto m = manifest(R"({"device": "cpu", "dispatch_key": "AutocastCPU", "lower_precision": ["bfloat16"],
    "generated_by": "ignored", "ops": [
      {"op": "mm", "policy": "lower_precision_fp"},
      {"op": "aten::norm.Scalar", "policy": "fp32_append_dtype", "redispatch": "norm.ScalarOpt_dtype"},
      {"op": "binary_cross_entropy", "policy": "banned", "message": "no"},
      {"op": "mybackend::scale", "policy": "fp32"}]})");
  ASSERT_TRUE(m) << out_.str();
  EXPECT_EQ(m->source, policy::PolicySource::manifest);
  EXPECT_EQ(m->device, "cpu");
  ASSERT_EQ(m->entries.size(), 4u);
  EXPECT_EQ(m->entries[1].op, "norm.Scalar");  // normalised like policies print names
  EXPECT_EQ(m->entries[1].redispatch_op, "norm.ScalarOpt_dtype");
  EXPECT_EQ(m->entries[2].message, "no");
  EXPECT_EQ(m->entries[3].op, "mybackend::scale");
  EXPECT_NE(m->entries[0].schema, nullptr);
  EXPECT_EQ(diags_.warning_count(), 0u);
}

TEST_F(AuditTest, ManifestErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[]", "m.json:1:1: error: a manifest is a JSON object with 'device', 'dispatch_key' and 'ops'; found an array"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU"})", "m.json:1:1: error: missing member 'ops'"},
      {R"({"device": ["cpu"], "dispatch_key": "AutocastCPU", "ops": []})",
       "m.json:1:12: error: 'device:' must be a device type name such as cuda or cpu, found a sequence"},
      {R"({"device": "gpu", "dispatch_key": "AutocastCPU", "ops": []})", "m.json:1:13: error: unknown device 'gpu'; did you mean 'cpu'?"},
      {R"({"device": "cpu", "dispatch_key": "K", "ops": []})",
       "m.json:1:36: error: unknown autocast dispatch key 'K' (expected one of: AutocastCPU, AutocastCUDA, AutocastXPU, "
       "AutocastIPU, AutocastHPU, AutocastXLA, AutocastMPS, AutocastMTIA, AutocastMAIA, AutocastPrivateUse1)"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "mm", "policy": "fp16"}]})",
       "m.json:1:82: error: unknown policy 'fp16' (expected one of: lower_precision_fp, fp32, fp32_set_opt_dtype, "
       "fp32_append_dtype, promote, banned, fp8)"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "mm.*", "policy": "fp32"}]})",
       "m.json:1:66: error: a manifest names single overloads, not 'mm.*'"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "norm.Scalar", "policy": "fp32_append_dtype"}]})",
       "m.json:1:58: error: an fp32_append_dtype entry needs 'redispatch' (the overload it calls)"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "mm", "policy": "fp32", "message": "x"}]})",
       "m.json:1:89: error: 'message:' is only meaningful in banned, not in fp32"},
      {R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "mm", "policy": "fp32"}, {"op": "mm", "policy": "fp32"}]})",
       "m.json:1:98: error: 'mm' is listed twice"},
  };
  for (const auto& [text, expected] : cases) {
    out_.str("");
    EXPECT_FALSE(manifest(text)) << text;
    EXPECT_EQ(first_diagnostic(), expected) << text;
  }
  // An op from another PyTorch is a warning, not an error.
  out_.str("");
  const auto m = manifest(R"({"device": "cpu", "dispatch_key": "AutocastCPU", "ops": [{"op": "mmm", "policy": "fp32"}]})");
  ASSERT_TRUE(m) << out_.str();
  EXPECT_EQ(first_diagnostic(),
            "m.json:1:66: warning: 'mmm' is not in the op schemas (did you mean 'mm'?); was the manifest generated from another "
            "PyTorch? (give --schemas for each input)");
  EXPECT_EQ(m->entries[0].schema, nullptr);
}

TEST_F(AuditTest, Families) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"conv2d", "matmul_conv"}, {"_scaled_mm", "matmul_conv"}, {"upsample_linear1d", "resampling_pooling"},
      {"log_softmax", "softmax_activation"}, {"log", "transcendental"}, {"special_erfcx", "transcendental"},
      {"cross_entropy_loss", "losses"}, {"layer_norm", "norms"}, {"normal", "random"}, {"sum", "reductions"},
      {"cumsum", "reductions"}, {"mm_backward", "autograd"}, {"_foreach_add", "foreach_fused"},
      {"add", "pointwise_arith"}, {"__and__", "pointwise_arith"}, {"cat", "shape_indexing"}, {"cdist", "distance"},
      {"linalg_svd", "linalg_fft"}, {"fft_rfft", "linalg_fft"}, {"is_nonzero", "metadata"}, {"vander", "other"},
  };
  for (const auto& [op, family] : expected) EXPECT_EQ(family_of(op).id, family) << op;
  EXPECT_EQ(op_families().back().id, "other");
}

TEST_F(AuditTest, CoverageCountsAndGroups) {
  const auto p = policy("autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n  fp32: [\"pow.Tensor_Scalar\", log]\n");
  ASSERT_TRUE(p) << out_.str();
  const CoverageReport r = compute_coverage(*p, *schemas_, {"mini.yaml"});
  // Eligible in the fixture: functional overloads with a Tensor input and no written argument.
  size_t eligible = 0;
  for (const model::FunctionSchema& s : schemas_->schemas()) eligible += model::is_autocast_eligible(s);
  EXPECT_EQ(r.eligible, eligible);
  EXPECT_EQ(r.covered, 3u);
  size_t uncovered = 0;
  const UncoveredOp* pow = nullptr;
  for (const FamilyGroup& g : r.families)
    for (const UncoveredOp& op : g.ops) {
      uncovered += op.overloads.size();
      if (op.op == "pow") pow = &op;
      EXPECT_NE(op.op, "mm");  // fully covered ops are not candidates
      EXPECT_NE(op.op, "add_");
    }
  EXPECT_EQ(uncovered, eligible - 3);
  ASSERT_NE(pow, nullptr);  // partly covered: the other overloads are candidates, the listed one is named
  EXPECT_EQ(pow->overloads.size(), 2u);
  ASSERT_EQ(pow->listed.size(), 1u);
  EXPECT_EQ(pow->listed[0]->op, "pow.Tensor_Scalar");
  const std::string md = coverage_markdown(r, sources_);
  EXPECT_NE(md.find("3 of " + std::to_string(eligible) + " eligible overloads are listed"), std::string::npos) << md;
  EXPECT_NE(md.find("| `mm` | lower_precision_fp |  | p.yaml:3:24 |"), std::string::npos) << md;
  const nlohmann::ordered_json j = coverage_json(r, sources_);
  EXPECT_EQ(j["counts"]["fp32"], 2);
  EXPECT_EQ(j["counts"]["total"], 3);
  EXPECT_EQ(j["eligible"]["not_listed"], eligible - 3);
}

TEST_F(AuditTest, DiffCategoriesInStableOrder) {
  const auto a = policy(R"(autocast: {device: cuda}
lists:
  lower_precision_fp: [mm, conv1d]
  fp32: [log, exp]
  fp32_append_dtype: [norm.Scalar]
  banned: [{op: binary_cross_entropy, message: "old"}]
)", "a.yaml");
  const auto b = policy(R"(autocast: {device: cuda}
lists:
  lower_precision_fp: [mm, addmm]
  fp32: [exp, conv1d, relu]
  fp32_append_dtype: [{op: norm.Scalar, redispatch: norm.ScalarOpt_dtype}]
  banned: [{op: binary_cross_entropy, message: "new"}]
)", "b.yaml");
  ASSERT_TRUE(a && b) << out_.str();
  const PolicyDiff d = diff_policies({&*a, &*schemas_}, {&*b, &*schemas_});
  ASSERT_EQ(d.added.size(), 2u);
  EXPECT_EQ(d.added[0].entry->op, "addmm");
  EXPECT_EQ(d.added[1].entry->op, "relu");
  ASSERT_EQ(d.removed.size(), 1u);
  EXPECT_EQ(d.removed[0].entry->op, "log");
  ASSERT_EQ(d.changed.size(), 2u);
  EXPECT_EQ(d.changed[0].from->op, "binary_cross_entropy");  // message changed
  EXPECT_EQ(d.changed[1].from->op, "conv1d");
  EXPECT_TRUE(d.header.empty());
  EXPECT_FALSE(d.distinct_schemas);
  const nlohmann::ordered_json j = diff_json(d, *a, *b);
  EXPECT_EQ(j["added"][0], (nlohmann::ordered_json{{"op", "addmm"}, {"policy", "lower_precision_fp"}}));
  EXPECT_EQ(j["changed"][1]["from"], "lower_precision_fp");
  EXPECT_EQ(j["changed"][1]["to"], "fp32");
  EXPECT_EQ(j["changed"][0]["message"]["to"], "new");
  EXPECT_TRUE(has_changes(d, DiffCategory::removed));
  // Identical inputs: nothing to report.
  const PolicyDiff same = diff_policies({&*a, &*schemas_}, {&*a, &*schemas_});
  EXPECT_FALSE(has_changes(same, DiffCategory::added) || has_changes(same, DiffCategory::removed) ||
               has_changes(same, DiffCategory::changed));
}

TEST_F(AuditTest, DiffAcrossSchemaVersions) {
  // B's schemas: exp is gone, mm's schema grew an argument, and a new op `gelu` exists.
  const uint32_t v2 = sources_.add_buffer("v2.yaml", R"(- func: mm(Tensor self, Tensor mat2, *, bool fast=False) -> Tensor
- func: log(Tensor self) -> Tensor
- func: gelu(Tensor self) -> Tensor
)");
  std::optional<model::SchemaSet> schemas_b = schema::load_schema_files({v2}, sources_, diags_);
  ASSERT_TRUE(schemas_b) << out_.str();
  const auto a = policy("autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log, exp]\n", "a.yaml");
  ASSERT_TRUE(a) << out_.str();
  const uint32_t file = sources_.add_buffer("b.yaml", "autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log, gelu]\n");
  std::optional<policy::PolicyFile> parsed = policy::parse_policy_file(sources_, file, diags_);
  ASSERT_TRUE(parsed);
  std::optional<policy::ResolvedPolicy> resolved = policy::resolve_policy({*parsed}, *schemas_b, diags_);
  ASSERT_TRUE(resolved) << out_.str();
  policy::ResolvedPolicy b = *resolved;
  b.name = "b.yaml";
  const PolicyDiff d = diff_policies({&*a, &*schemas_}, {&b, &*schemas_b});
  EXPECT_TRUE(d.distinct_schemas);
  ASSERT_EQ(d.added.size(), 1u);
  EXPECT_TRUE(d.added[0].absent_from_other_schemas);  // gelu is new in B's schemas
  ASSERT_EQ(d.removed.size(), 1u);
  EXPECT_TRUE(d.removed[0].absent_from_other_schemas);  // exp is gone from them
  ASSERT_EQ(d.schema_changed.size(), 1u);
  EXPECT_EQ(d.schema_changed[0].first->name().name, "mm");
  const nlohmann::ordered_json j = diff_json(d, *a, b);
  EXPECT_EQ(j["added"][0]["schemas"], "not in A's op schemas");
  EXPECT_EQ(j["removed"][0]["schemas"], "not in B's op schemas");
  const std::string md = diff_markdown(d, *a, b);
  EXPECT_NE(md.find("| `exp` | fp32 | not in B's op schemas |"), std::string::npos) << md;
}

TEST_F(AuditTest, WrittenPolicyLoadsBackToTheSameEntries) {
  const auto original = policy(R"(autocast: {device: privateuseone}
lists:
  lower_precision_fp: [mm, conv1d, mybackend::fused_linear]
  fp32: [log, "pow.*"]
  fp32_set_opt_dtype: [softmax.int, sum]
  fp32_append_dtype: [norm.Scalar]
  promote: [cat, index_put, addcdiv]
  banned:
    - {op: binary_cross_entropy, message: "unsafe: \"quotes\", back\\slash, tab\tand\nnewline"}
)");
  ASSERT_TRUE(original) << out_.str();
  policy::ResolvedPolicy imported = *original;
  imported.source = policy::PolicySource::cpp;
  imported.lower_precision.clear();
  const std::string text = import::policy_yaml(imported, {"kernels.cpp"});
  EXPECT_NE(text.find("    - {op: norm.Scalar, redispatch: norm.ScalarOpt_dtype}\n"), std::string::npos) << text;
  const auto back = policy(text, "back.yaml");
  ASSERT_TRUE(back) << out_.str() << text;
  const PolicyDiff d = diff_policies({&*original, &*schemas_}, {&*back, &*schemas_});
  EXPECT_TRUE(d.added.empty() && d.removed.empty() && d.changed.empty()) << diff_markdown(d, *original, *back);
  EXPECT_EQ(back->find("binary_cross_entropy")->message, "unsafe: \"quotes\", back\\slash, tab\tand\nnewline");
  EXPECT_EQ(import::yaml_quoted("a\x01z"), "\"a\\x01z\"");
}

// Note [precision by place]: the policy writer keeps entries' modules and the section (with the
// lower-precision dtypes a section needs when C++ does not say them); the entries of one overload,
// which no call matches twice, compare equal in another order (the writer lists them list by list).
TEST_F(AuditTest, WrittenPolicyKeepsModuleRules) {
  const auto original = policy(R"(autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  fp32:
    - {op: log, modules: ["*.attn", lm_head], dtypes: [float16]}
    - {op: softmax.int, modules: [head]}
  lower_precision_fp:
    - {op: log, modules: [encoder], dtypes: [bfloat16]}
  fp32_set_opt_dtype: [softmax.int]
modules: {"*.norm": fp32, layers.2: float16, encoder: off}
)");
  ASSERT_TRUE(original) << out_.str();
  policy::ResolvedPolicy imported = *original;
  imported.source = policy::PolicySource::cpp;
  imported.lower_precision.clear();
  const std::string text = import::policy_yaml(imported, {"kernels.cpp"});
  EXPECT_NE(text.find("  lower_precision: [bfloat16, float16]  # the device's default and the module sections' dtypes\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("modules:\n  \"*.norm\": fp32\n  layers.2: float16\n  encoder: off\n"), std::string::npos) << text;
  const auto back = policy(text, "back.yaml");
  ASSERT_TRUE(back) << out_.str() << text;
  EXPECT_EQ(back->sections, original->sections);
  const PolicyDiff d = diff_policies({&*original, &*schemas_}, {&*back, &*schemas_});
  EXPECT_TRUE(d.added.empty() && d.removed.empty() && d.changed.empty() && d.header.empty()) << diff_markdown(d, *original, *back);
  // log's two scoped entries come back in list order, not the original's.
  ASSERT_EQ(back->entries.size(), 4u);
  EXPECT_NE(back->find("log")->policy, original->find("log")->policy);
  // A changed pattern is a change, and the section's rows say what changed.
  policy::ResolvedPolicy other = *back;
  other.entries[0].rule.modules = {"elsewhere"};
  other.sections.pop_back();
  const PolicyDiff e = diff_policies({&*original, &*schemas_}, {&other, &*schemas_});
  ASSERT_EQ(e.changed.size(), 1u);
  ASSERT_EQ(e.header.size(), 1u);
  EXPECT_EQ(e.header[0].field, "modules: encoder");
  EXPECT_EQ(e.header[0].from, "off");
  EXPECT_EQ(e.header[0].to, "none");
}

// Note [precompiled headers in compile commands]: each row is a command as a build writes it and
// what the importer's Clang is given instead.
TEST(CompileCommand, PrecompiledHeadersAreIncludedFromSource) {
  using Args = std::vector<std::string>;
  const Args direct = {"-Xclang", "-include", "-Xclang", "/b/cmake_pch.hxx"};
  const auto with = [](Args head, const Args& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  const struct {
    Args command;
    Args expected;
  } cases[] = {
      // CMake with GCC: the .gch beside cmake_pch.hxx would be read as Clang's own.
      {{"c++", "-O2", "-Winvalid-pch", "-include", "/b/cmake_pch.hxx", "-c", "f.cpp"},
       with(with({"c++", "-O2", "-Winvalid-pch"}, direct), {"-c", "f.cpp"})},
      {{"c++", "-include/b/cmake_pch.hxx", "f.cpp"}, with(with({"c++"}, direct), {"f.cpp"})},
      {{"c++", "--include=/b/cmake_pch.hxx", "f.cpp"}, with(with({"c++"}, direct), {"f.cpp"})},
      {{"c++", "--include", "/b/cmake_pch.hxx", "f.cpp"}, with(with({"c++"}, direct), {"f.cpp"})},
      {{"c++", "-fpch-preprocess", "-fpch-deps", "f.cpp"}, {"c++", "f.cpp"}},
      // CMake with Clang: the .pch of another Clang is dropped, its header included from source.
      {{"clang++", "-Xclang", "-include-pch", "-Xclang", "/b/cmake_pch.hxx.pch", "-Xclang", "-include", "-Xclang",
        "/b/cmake_pch.hxx", "f.cpp"},
       with(with({"clang++"}, direct), {"f.cpp"})},
      {{"clang++", "-include-pch", "/b/x.pch", "f.cpp"}, {"clang++", "f.cpp"}},
      // Everything else is kept as it is, a front-end argument's value too.
      {{"c++", "-Xclang", "-include", "-Xclang", "x.h", "-Xclang", "-fno-validate-pch", "f.cpp"},
       {"c++", "-Xclang", "-include", "-Xclang", "x.h", "-Xclang", "-fno-validate-pch", "f.cpp"}},
      {{"c++", "-isystem", "/torch/include", "-DX=1", "f.cpp"}, {"c++", "-isystem", "/torch/include", "-DX=1", "f.cpp"}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(import::without_precompiled_headers(c.command), c.expected) << ::testing::PrintToString(c.command);
  }
}

// Note [per-dtype wrapper templates]: backends' cast-policy values and template parameter names.
TEST(CastValues, ValuesAndDtypesOfWrapperTemplates) {
  const struct {
    const char* value;
    std::optional<std::optional<PolicyKind>> meaning;  // outer nullopt: the language cannot say it
  } values[] = {
      {"lower_precision_fp", PolicyKind::lower_precision_fp},
      {"user_defined_dtype", PolicyKind::lower_precision_fp},
      {"fp32", PolicyKind::fp32},
      {"fp32_set_opt_dtype", PolicyKind::fp32_set_opt_dtype},
      {"fp32_append_dtype", PolicyKind::fp32_append_dtype},
      {"promote", PolicyKind::promote},
      {"fallthrough", std::optional<PolicyKind>()},
      {"banned", std::nullopt},
      {"fp8", std::nullopt},
      {"int8", std::nullopt},
      {"bf16", std::nullopt},
  };
  for (const auto& v : values) {
    const std::optional<import::CastValue> got = import::cast_value(v.value);
    ASSERT_EQ(got.has_value(), v.meaning.has_value()) << v.value;
    if (got) {
      EXPECT_EQ(got->policy, *v.meaning) << v.value;
    }
  }
  const struct {
    const char* parameter;
    std::optional<std::string> dtype;
  } parameters[] = {
      {"bf16_cast_policy", "bfloat16"}, {"fp16_cast_policy", "float16"}, {"BFloat16Policy", "bfloat16"},
      {"half_policy", "float16"},       {"kFloat16", "float16"},         {"policy", std::nullopt},
      {"fp32_policy", std::nullopt},    {"", std::nullopt},
  };
  for (const auto& p : parameters) EXPECT_EQ(import::dtype_of_parameter(p.parameter), p.dtype) << p.parameter;
}

}  // namespace
}  // namespace autocastgen::audit
