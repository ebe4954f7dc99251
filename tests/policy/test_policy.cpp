// Policy loading and resolution: semantics of each rule, and a table of one-line error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "policy/resolver.h"
#include "schema/schema_file.h"
#include "support/yaml.h"

namespace autocastgen::policy {
namespace {

namespace fs = std::filesystem;

// Writes policy files into a fresh directory and resolves them against the schema fixture.
class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test is named "Name/N": one folder level, so that TearDown removes it all.
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(test.begin(), test.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("autocastgen_policy_" + std::to_string(::getpid()) + "_" + test);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<uint32_t> files;
    std::string error;
    for (const char* name : {"mini_native_functions.yaml", "custom_ops.yaml"})
      files.push_back(*sources_.add_file(fs::path(AUTOCASTGEN_TEST_DATA) / "schemas" / name, error));
    DiagnosticEngine schema_diags(sources_, diag_text_);
    schemas_ = schema::load_schema_files(files, sources_, schema_diags);
    ASSERT_TRUE(schemas_.has_value()) << diag_text_.str();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  std::optional<ResolvedPolicy> resolve(const std::string& name) {
    diags_ = std::make_unique<DiagnosticEngine>(sources_, diag_text_);
    return load_policy(dir_ / name, *schemas_, sources_, *diags_);
  }

  // The diagnostics without the directory prefix, for readable expectations.
  std::string diagnostics() const {
    std::string text = diag_text_.str();
    const std::string prefix = (dir_ / "").string();
    for (size_t pos; (pos = text.find(prefix)) != std::string::npos;) text.erase(pos, prefix.size());
    return text;
  }

  static std::map<std::string, PolicyKind> by_op(const ResolvedPolicy& policy) {
    std::map<std::string, PolicyKind> out;
    for (const ResolvedEntry& e : policy.entries) out[e.schema->name().display()] = e.policy;
    return out;
  }

  fs::path dir_;
  SourceManager sources_;
  std::ostringstream diag_text_;
  std::unique_ptr<DiagnosticEngine> diags_;
  std::optional<model::SchemaSet> schemas_;
};

TEST_F(PolicyTest, ResolvesEveryPolicyKind) {
  write("p.yaml", R"(autocast:
  device: cuda
lists:
  lower_precision_fp: [mm, conv1d]
  fp32: [log]
  fp32_set_opt_dtype: [softmax.int, sum]
  fp32_append_dtype: [norm.Scalar]
  promote: [cat]
  banned:
    - {op: binary_cross_entropy, message: "use the logits form"}
)");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  EXPECT_EQ(policy->device, "cuda");
  EXPECT_EQ(policy->dispatch_key, "AutocastCUDA");
  EXPECT_EQ(policy->lower_precision, (std::vector<std::string>{"float16", "bfloat16"}));
  ASSERT_EQ(policy->entries.size(), 8u);
  // File order is kept.
  EXPECT_EQ(policy->entries[0].schema->name().display(), "mm");
  EXPECT_EQ(policy->entries[1].schema->name().display(), "conv1d");  // the default overload only
  EXPECT_EQ(policy->count(PolicyKind::fp32_set_opt_dtype), 2u);
  const ResolvedEntry& append = policy->entries[5];
  EXPECT_EQ(append.policy, PolicyKind::fp32_append_dtype);
  ASSERT_NE(append.redispatch, nullptr);
  EXPECT_EQ(append.redispatch->name().display(), "norm.ScalarOpt_dtype");  // Scalar p widens to Scalar? p
  EXPECT_EQ(policy->entries.back().message, "use the logits form");
  EXPECT_EQ(diagnostics(), "");
}

// behaviour_str names the policies compiled graphs were traced with (Note [policies in the trace
// key]): equal for a file that says the same in other words, different for any change of effect.
TEST_F(PolicyTest, BehaviourTextIsEqualExactlyForEqualBehaviour) {
  const std::string base = "autocast:\n  device: cpu\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log]\n";
  write("a.yaml", base);
  write("same.yaml", "# the same policy, spelled otherwise\nlists: {fp32: [log], lower_precision_fp: [mm]}\n"
                     "autocast: {device: cpu}\n");
  write("base.yaml", "autocast: {device: cpu}\nlists:\n  lower_precision_fp: [mm]\n");
  write("derived.yaml", "extends: base.yaml\nlists:\n  fp32: [log]\n");
  const std::vector<std::pair<std::string, std::string>> others = {
      {"kind", "autocast:\n  device: cpu\nlists:\n  fp32: [mm, log]\n"},
      {"dtypes", "autocast:\n  device: cpu\n  lower_precision: [float16]\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log]\n"},
      {"device", "autocast:\n  device: cuda\nlists:\n  lower_precision_fp: [mm]\n  fp32: [log]\n"},
      {"rule", base + "  promote: [cat]\n"},
      {"condition", "autocast:\n  device: cpu\nlists:\n  lower_precision_fp: [{op: mm, dtypes: [float16]}]\n  fp32: [log]\n"},
      {"section", base + "modules:\n  head: fp32\n"},
      {"fp8", "autocast:\n  device: cpu\n  fp8: {scaling: current}\nlists:\n  fp8: [mm]\n  fp32: [log]\n"},
      {"fp8 recipe", "autocast:\n  device: cpu\n  fp8: {scaling: current, select: auto}\nlists:\n  fp8: [mm]\n  fp32: [log]\n"},
  };
  auto a = resolve("a.yaml");
  ASSERT_TRUE(a) << diagnostics();
  for (const char* same : {"same.yaml", "derived.yaml"}) {
    auto b = resolve(same);
    ASSERT_TRUE(b) << diagnostics();
    EXPECT_EQ(a->behaviour_str(), b->behaviour_str()) << same;
  }
  std::set<std::string> seen = {a->behaviour_str()};
  for (const auto& [what, text] : others) {
    write(what + ".yaml", text);
    auto other = resolve(what + ".yaml");
    ASSERT_TRUE(other) << what << ": " << diagnostics();
    EXPECT_TRUE(seen.insert(other->behaviour_str()).second) << what << " behaves as an earlier policy:\n" << other->behaviour_str();
  }
}

TEST_F(PolicyTest, GlobExpandsToEligibleOverloadsOnly) {
  write("p.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [\"pow.*\", \"add.*\"]\n");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  std::vector<std::string> names;
  for (const auto& e : policy->entries) names.push_back(e.schema->name().display());
  EXPECT_EQ(names, (std::vector<std::string>{"pow.Tensor_Tensor", "pow.Scalar", "pow.Tensor_Scalar", "add.Tensor", "add.Scalar"}));
  EXPECT_EQ(policy->dispatch_key, "AutocastCPU");
  EXPECT_EQ(policy->lower_precision.front(), "bfloat16");  // the CPU default
}

TEST_F(PolicyTest, ExtendsInheritsRemovesAndOverridesTheHeader) {
  write("base.yaml", R"(autocast: {device: privateuseone, lower_precision: [bfloat16]}
lists:
  lower_precision_fp: [mm, addmm]
  fp32: [log, exp]
)");
  write("derived.yaml", R"(autocast: {device: cuda}
extends: base.yaml
remove: [exp]
lists:
  fp32: [exp]
  promote: [stack]
)");
  std::filesystem::create_directories(dir_ / "sub");
  write("sub/leaf.yaml", "extends: ../derived.yaml\nremove: [addmm]\nlists:\n  promote: [addmm]\n");
  auto policy = resolve("sub/leaf.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  EXPECT_EQ(policy->device, "cuda");
  EXPECT_EQ(policy->dispatch_key, "AutocastCUDA");  // a new device brings its own key
  EXPECT_EQ(policy->lower_precision, (std::vector<std::string>{"bfloat16"}));  // inherited
  EXPECT_EQ(by_op(*policy), (std::map<std::string, PolicyKind>{{"mm", PolicyKind::lower_precision_fp},
                                                               {"log", PolicyKind::fp32},
                                                               {"exp", PolicyKind::fp32},
                                                               {"stack", PolicyKind::promote},
                                                               {"addmm", PolicyKind::promote}}));
  // Inherited entries come first, in their files' order.
  EXPECT_EQ((policy->entries.front().schema)->name().display(), "mm");
  EXPECT_EQ((policy->entries.back().schema)->name().display(), "addmm");
  ASSERT_EQ(policy->files.size(), 3u);
  EXPECT_NE(sources_.name(policy->files[0]).find("leaf.yaml"), std::string::npos);
}

// Note [the files a chain read]: the one reader of `extends:` says which files it read, for a
// file and for text; text's own relative `extends:` is read from the folder it is given.
TEST_F(PolicyTest, ChainReportsTheFilesItRead) {
  write("base.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n");
  fs::create_directories(dir_ / "sub");
  write("sub/mid.yaml", "extends: ../base.yaml\nlists:\n  promote: [cat]\n");
  write("top.yaml", "extends: sub/mid.yaml\nlists:\n  lower_precision_fp: [mm]\n");
  DiagnosticEngine diags(sources_, diag_text_);
  std::vector<fs::path> read;
  auto chain = load_policy_chain(dir_ / "top.yaml", sources_, diags, &read);
  ASSERT_TRUE(chain) << diagnostics();
  EXPECT_EQ(read, (std::vector<fs::path>{dir_ / "top.yaml", dir_ / "sub/mid.yaml", dir_ / "sub/../base.yaml"}));
  // What the generator's depfile names (ResolvedPolicy::files) is the same list.
  auto resolved = resolve_policy(*chain, *schemas_, diags);
  ASSERT_TRUE(resolved) << diagnostics();
  ASSERT_EQ(resolved->files.size(), read.size());
  for (size_t i = 0; i < read.size(); ++i) EXPECT_EQ(sources_.name(resolved->files[i]), read[i].string());

  // Text: `extends:` from the folder given, wherever the process is; the text is not a file read.
  read.clear();
  const PolicyText text{"my policy", "extends: mid.yaml   # the middle\nlists:\n  fp32: [exp]\n", dir_ / "sub"};
  chain = load_policy_chain(text, sources_, diags, &read);
  ASSERT_TRUE(chain) << diagnostics();
  EXPECT_EQ(sources_.name(chain->front().file), "my policy");
  EXPECT_EQ(read, (std::vector<fs::path>{dir_ / "sub/mid.yaml", dir_ / "sub/../base.yaml"}));
  resolved = resolve_policy(*chain, *schemas_, diags);
  ASSERT_TRUE(resolved) << diagnostics();
  EXPECT_EQ(by_op(*resolved), (std::map<std::string, PolicyKind>{
                                  {"log", PolicyKind::fp32}, {"cat", PolicyKind::promote}, {"exp", PolicyKind::fp32}}));
  // Any spelling YAML has for the value (the Python side once read only one-line ones), and an
  // absolute path, which no folder changes.
  for (const std::string& spelling : {std::string("extends:\n  mid.yaml\n"), std::string("extends: |-\n  mid.yaml\n"),
                                      std::string("{extends: 'mid.yaml'}\n"), std::string("extends: \"\\x6did.yaml\"\n"),
                                      "extends: " + (dir_ / "sub/mid.yaml").string() + "\n"}) {
    read.clear();
    chain = load_policy_chain(PolicyText{"t", spelling, dir_ / "sub"}, sources_, diags, &read);
    ASSERT_TRUE(chain) << spelling << diagnostics();
    ASSERT_EQ(read.size(), 2u) << spelling;
    EXPECT_EQ(read[0].filename(), "mid.yaml") << spelling;
  }
  EXPECT_EQ(diagnostics(), "");
}

TEST_F(PolicyTest, ChainErrorsAreLocatedInTheFileThatHasThem) {
  write("base.yaml", "autocast: {device: cpu}\nlists: [\n");
  write("mid.yaml", "extends: base.yaml\n");
  DiagnosticEngine diags(sources_, diag_text_);
  std::vector<fs::path> read;
  // The files up to the one with the error are named read; the error is in that file.
  EXPECT_FALSE(load_policy_chain(PolicyText{"<string>", "extends: mid.yaml\n", dir_}, sources_, diags, &read));
  EXPECT_EQ(read, (std::vector<fs::path>{dir_ / "mid.yaml", dir_ / "base.yaml"}));
  EXPECT_TRUE(diagnostics().starts_with("base.yaml:3:1: error: invalid YAML")) << diagnostics();
  // A missing base: at the text's own `extends:`, under its name.
  diag_text_.str("");
  read.clear();
  EXPECT_FALSE(load_policy_chain(PolicyText{"given.yaml", "lists: {}\nextends: nowhere.yaml\n", dir_}, sources_, diags, &read));
  EXPECT_TRUE(read.empty());
  EXPECT_TRUE(diagnostics().starts_with("given.yaml:2:10: error: cannot read extended policy 'nowhere.yaml': No such file")) << diagnostics();
  // Text over a policy file's limit is refused as such a file is, before it is read.
  diag_text_.str("");
  EXPECT_FALSE(load_policy_chain(PolicyText{"big", std::string(kMaxPolicyFileBytes + 1, '#'), dir_}, sources_, diags));
  EXPECT_EQ(diagnostics(), "autocastgen: error: cannot read policy 'big': larger than 1 MiB, the limit for policy files\n");
}

// Hostile `extends:` values: each is an error at its place, and nothing is read past it.
TEST_F(PolicyTest, HostileExtendsValues) {
  write("base.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log]\n");
  write("loop.yaml", "extends: loop.yaml\n");
  // 64 files (the text and 63 in a chain) is the limit; one more is an error.
  for (int i = 1; i < 64; ++i) write("c" + std::to_string(i) + ".yaml", "extends: c" + std::to_string(i + 1) + ".yaml\n");
  write("c64.yaml", "autocast: {device: cpu}\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"extends: \"base.yaml\\0junk\"\n", "t:1:10: error: 'extends:' names a path holding a NUL byte, which no file can have"},
      {"extends: [base.yaml]\n", "t:1:10: error: 'extends:' must be a file path, found a sequence"},
      {"extends: {base.yaml: 1}\n", "t:1:10: error: 'extends:' must be a file path, found a mapping"},
      {"extends: ''\n", "t:1:10: error: 'extends:' must be a file path, found an empty string"},
      {"extends: .\n", "t:1:10: error: cannot read extended policy '.': is a directory"},  // (diagnostics() drops dir_)
      {"extends: loop.yaml\n", "loop.yaml:1:10: error: 'extends:' cycle: loop.yaml -> loop.yaml"},
      {"extends: c2.yaml\n", ""},
      {"extends: c1.yaml\n", "c63.yaml:1:10: error: 'extends:' chain is deeper than 64 files"},
      {"extends: /dev/zero\n", "t:1:10: error: cannot read extended policy '/dev/zero': larger than 1 MiB, the limit for policy files"},
      {"extends:" + std::string(60000, ' ') + "\n", "t:1:9: error: 'extends:' must be a file path, found an empty value"},
  };
  for (const auto& [text, expected] : cases) {
    diag_text_.str("");
    DiagnosticEngine diags(sources_, diag_text_);
    const bool loaded = load_policy_chain(PolicyText{"t", text, dir_}, sources_, diags).has_value();
    EXPECT_EQ(loaded, expected.empty()) << text.substr(0, 40) << diagnostics();
    EXPECT_TRUE(diagnostics().starts_with(expected)) << text.substr(0, 40) << "\n" << diagnostics();
  }
}

TEST_F(PolicyTest, RedundantEntriesAreWarningsOnly) {
  write("p.yaml", "autocast: {device: cpu}\nlists:\n  fp32: [log, log]\n");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy);
  EXPECT_EQ(policy->entries.size(), 1u);
  EXPECT_EQ(diags_->warning_count(), 1u);
  EXPECT_EQ(diagnostics(),
            "p.yaml:3:15: warning: redundant entry: 'log' is already listed in fp32\n"
            "  fp32: [log, log]\n"
            "              ^~~\n"
            "p.yaml:3:10: note: listed here\n"
            "  fp32: [log, log]\n"
            "         ^~~\n");
}

TEST_F(PolicyTest, CustomNamespaceOps) {
  write("p.yaml", "autocast: {device: privateuseone}\nlists:\n  lower_precision_fp: [mybackend::fused_linear, mm]\n  fp32: [\"mybackend::scale\"]\n");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  EXPECT_EQ(policy->entries[0].schema->name().display(), "mybackend::fused_linear");
  EXPECT_EQ(policy->dispatch_key, "AutocastPrivateUse1");
}

TEST_F(PolicyTest, AppendDtypeExplicitRedispatch) {
  write("p.yaml", "autocast: {device: cuda}\nlists:\n  fp32_append_dtype:\n    - {op: norm.ScalarOpt_dim, redispatch: norm.ScalarOpt_dim_dtype}\n");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  EXPECT_EQ(policy->entries[0].redispatch->name().display(), "norm.ScalarOpt_dim_dtype");
}

TEST_F(PolicyTest, AllErrorsOfARunAreReported) {
  write("p.yaml", "autocast: {device: cuda}\nlists:\n  fp32: [mmm, add_.Tensor, arange.start]\n  promote: [log]\n  banned: [{op: log, message: x}]\n");
  EXPECT_FALSE(resolve("p.yaml"));
  EXPECT_EQ(diags_->error_count(), 4u) << diagnostics();
}

// One-line error cases: (policy text, the first diagnostic's `line:col: error: text`).
struct ErrorCase {
  const char* policy;
  const char* expected;
};

// Note [precision by place]: an entry scoped to modules shares its overload with unscoped ones and
// comes before them; two scoped entries overlap as their other conditions do.
TEST_F(PolicyTest, ModuleScopedEntriesComeFirstAndShareTheirOverload) {
  write("p.yaml", R"(autocast:
  device: cpu
  lower_precision: [bfloat16, float16]
lists:
  fp32_set_opt_dtype: [softmax.int]
  fp32:
    - {op: softmax.int, modules: ["layers.*.attn", lm_head]}
    - {op: log, dtypes: [float16]}
  lower_precision_fp:
    - {op: log, modules: ["*"], dtypes: [float16]}
    - {op: log, modules: [encoder], dtypes: [bfloat16]}
)");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  ASSERT_EQ(policy->entries.size(), 5u);
  const auto& e = policy->entries;
  EXPECT_EQ(e[0].op, "softmax.int");
  EXPECT_EQ(e[0].policy, PolicyKind::fp32);
  EXPECT_EQ(e[0].rule.modules, (std::vector<std::string>{"layers.*.attn", "lm_head"}));
  ASSERT_EQ(e[0].module_locations.size(), 2u);
  EXPECT_EQ(sources_.location_text(e[0].module_locations[0]).substr(sources_.location_text(e[0].module_locations[0]).rfind('/') + 1),
            "p.yaml:7:36");
  EXPECT_EQ(e[1].policy, PolicyKind::fp32_set_opt_dtype);
  EXPECT_TRUE(e[1].rule.modules.empty());
  // log: the two scoped entries (file order), then the unscoped one listed before them.
  EXPECT_EQ(e[2].rule.modules, std::vector<std::string>{"*"});
  EXPECT_EQ(e[3].rule.modules, std::vector<std::string>{"encoder"});
  EXPECT_EQ(e[4].policy, PolicyKind::fp32);
  EXPECT_TRUE(e[4].rule.modules.empty());
  EXPECT_EQ(e[2].rule.str(), R"({dtypes: [float16], modules: ["*"]})");
  EXPECT_EQ(e[0].rule.condition_str(), "{modules: [layers.*.attn, lm_head]}");
  EXPECT_TRUE(policy->sections.empty());
}

TEST_F(PolicyTest, RulesOverlapIgnoresPatternsButNotScope) {
  Rule scoped_a;
  scoped_a.modules = {"a"};
  Rule scoped_b;
  scoped_b.modules = {"b"};
  Rule plain;
  EXPECT_FALSE(rules_overlap(scoped_a, plain));
  EXPECT_FALSE(rules_overlap(plain, scoped_b));
  EXPECT_TRUE(rules_overlap(scoped_a, scoped_b));  // patterns are not compared
  scoped_b.dtypes = {"float16"};
  scoped_a.dtypes = {"bfloat16"};
  EXPECT_FALSE(rules_overlap(scoped_a, scoped_b));
  EXPECT_TRUE(scoped_a.conditional());
  EXPECT_FALSE(scoped_a == scoped_b);
}

// Sections: the derived file's first, a derived pattern replacing the base's.
TEST_F(PolicyTest, ModuleSectionsMergeAcrossExtends) {
  write("base.yaml", R"(autocast: {device: cpu}
lists: {fp32: [log]}
modules:
  lm_head: off
  decoder.norm: fp32
  "*.attn": bfloat16
)");
  write("p.yaml", R"(extends: base.yaml
autocast: {lower_precision: [float16, bfloat16]}
modules:
  layers.2: float16
  lm_head: fp32
)");
  auto policy = resolve("p.yaml");
  ASSERT_TRUE(policy) << diagnostics();
  ASSERT_EQ(policy->sections.size(), 4u);
  EXPECT_EQ(sections_str(policy->sections), R"({layers.2: float16, lm_head: fp32, decoder.norm: fp32, "*.attn": bfloat16})");
  EXPECT_EQ(policy->sections[0].kind, SectionKind::dtype);
  EXPECT_EQ(policy->sections[0].value(), "float16");
  EXPECT_EQ(policy->sections[1].kind, SectionKind::fp32);
  EXPECT_EQ(sources_.line_column(policy->sections[1].location).line, 5u);  // the derived file's
  EXPECT_EQ(policy->sections[3].pattern, "*.attn");
}

// Note [fp8 by place]: `{fp8: on|off}` section values resolve, print as written and read back.
TEST(SectionFp8, ValuesRoundTrip) {
  for (const std::string_view text : {"{fp8: on}", "{fp8: off}"}) {
    const std::optional<ModuleSection> section = parse_section_value(text);
    ASSERT_TRUE(section) << text;
    EXPECT_TRUE(section->is_fp8());
    EXPECT_EQ(section->value(), text);
    EXPECT_EQ(section->kind_name(), text == "{fp8: on}" ? "fp8_on" : "fp8_off");
  }
  EXPECT_FALSE(parse_section_value("fp8_off"));
  EXPECT_FALSE(parse_section_value("{fp8: maybe}"));
  ModuleSection plain = *parse_section_value("fp32");
  plain.pattern = "layers.0";
  ModuleSection off = *parse_section_value("{fp8: off}");
  off.pattern = "layers.*.mlp";
  EXPECT_EQ(sections_str({plain, off}), R"({layers.0: fp32, layers.*.mlp: {fp8: off}})");
}

// What Rule::str() and sections_str() print is the language: written back into a policy file, it
// reads back to an equal rule and section (patterns quoted where YAML needs it).
TEST_F(PolicyTest, ModuleRulesPrintAndReadBackEqual) {
  write("p.yaml", R"(autocast: {device: cpu, lower_precision: [bfloat16, float16]}
lists:
  fp32:
    - {op: log, modules: ["*.attn", "layers.*", "true", "1", lm_head, "a#b", "x:y", "{z}", "'q'"], dtypes: [float16]}
    - {op: pow.Tensor_Scalar, modules: [encoder], unless: {exponent: 2}}
modules: {"*": off, "off": fp32, "layers.*.attn": bfloat16, "null": float16, "a,b": off}
)");
  auto first = resolve("p.yaml");
  ASSERT_TRUE(first) << diagnostics();
  std::string text = "autocast: {device: cpu, lower_precision: [bfloat16, float16]}\nlists:\n  fp32:\n";
  for (const ResolvedEntry& e : first->entries) {
    const std::string rule = e.rule.str();
    ASSERT_EQ(rule.front(), '{');
    text += "    - {op: " + e.op + ", " + rule.substr(1) + "\n";
  }
  text += "modules: " + sections_str(first->sections) + "\n";
  write("q.yaml", text);
  auto second = resolve("q.yaml");
  ASSERT_TRUE(second) << diagnostics() << text;
  ASSERT_EQ(first->entries.size(), second->entries.size());
  for (size_t i = 0; i < first->entries.size(); ++i) EXPECT_EQ(first->entries[i].rule, second->entries[i].rule) << text;
  EXPECT_EQ(first->sections, second->sections) << text;
  EXPECT_EQ(first->entries[0].rule.modules.size(), 9u);
  EXPECT_EQ(first->sections.size(), 5u);
}

class PolicyErrorTable : public PolicyTest, public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(PolicyErrorTable, FirstDiagnostic) {
  write("p.yaml", GetParam().policy);
  EXPECT_FALSE(resolve("p.yaml").has_value());
  std::string first = diagnostics().substr(0, diagnostics().find('\n'));
  ASSERT_TRUE(first.starts_with("p.yaml:")) << diagnostics();
  EXPECT_EQ(first.substr(7), GetParam().expected) << diagnostics();
}

INSTANTIATE_TEST_SUITE_P(
    Table, PolicyErrorTable,
    ::testing::Values(
        ErrorCase{"", "1:1: error: policy file is empty; expected a mapping with 'autocast:' and 'lists:'"},
        ErrorCase{"- mm\n", "1:1: error: expected a mapping at the top of a policy file, found a sequence"},
        ErrorCase{"autocast: {device: cuda}\nlist: {}\n", "2:1: error: unknown top-level key 'list'; did you mean 'lists'?"},
        ErrorCase{"autocast: {device: cuda}\nautocast: {device: cpu}\n", "2:1: error: duplicate key 'autocast'"},
        ErrorCase{"autocast: {device: gpu}\n", "1:20: error: unknown device 'gpu'; did you mean 'cpu'?"},
        ErrorCase{"autocast: {device: cuda, dispatch_key: AutocastCuda}\n",
                  "1:40: error: unknown autocast dispatch key 'AutocastCuda'; did you mean 'AutocastCUDA'?"},
        ErrorCase{"autocast: {device: cuda, lower_precision: [fp16]}\n",
                  "1:44: error: unknown lower-precision dtype 'fp16'; did you mean 'float16'?"},
        ErrorCase{"autocast: {device: cuda, lower_precision: []}\n",
                  "1:43: error: 'lower_precision:' needs at least one dtype (float16 or bfloat16)"},
        ErrorCase{"autocast: {device: cuda, precision: x}\n",
                  "1:26: error: unknown key in 'autocast:' 'precision' (expected one of: device, dispatch_key, lower_precision, fp8)"},
        ErrorCase{"lists: {fp32: [log]}\n", "1:1: error: no 'autocast: device:' in this policy or in the files it extends"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp16: [mm]}\n",
                  "2:9: error: unknown policy 'fp16' (expected one of: lower_precision_fp, fp32, fp32_set_opt_dtype, "
                  "fp32_append_dtype, promote, banned, fp8)"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: log}\n", "2:15: error: the 'fp32' list must be a sequence, found a scalar"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [mn]}\n", "2:16: error: unknown op 'mn'; did you mean 'mm'?"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [log.outt]}\n",
                  "2:16: error: unknown overload 'log.outt' (overloads: log)"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [add]}\n",
                  "2:16: error: 'add' has no default overload; write one of: add.Scalar, add.Tensor, or 'add.*'"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [relu_.*]}\n",
                  "2:16: error: 'relu_.*' matches no eligible overload: all 1 overloads of 'relu_' are in-place, out=, mutable "
                  "or without a Tensor input"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [log.out]}\n",
                  "2:16: error: 'log.out' cannot autocast: it is an out= overload; only functional overloads autocast"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [add_.Tensor]}\n",
                  "2:16: error: 'add_.Tensor' cannot autocast: it is an in-place overload; only functional overloads autocast"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [_amp_update_scale_]}\n",
                  "2:16: error: '_amp_update_scale_' cannot autocast: it is an in-place overload; only functional overloads "
                  "autocast"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [set_data]}\n",
                  "2:16: error: 'set_data' cannot autocast: it writes its argument 'self'"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [arange.start]}\n",
                  "2:16: error: 'arange.start' cannot autocast: it has no Tensor-like input that could be floating point"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [log], promote: [log]}\n",
                  "2:32: error: 'log' is listed in both fp32 and promote"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [\"pow.*\"], promote: [pow.Scalar]}\n",
                  "2:36: error: 'pow.Scalar' is listed in both fp32 and promote"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32_set_opt_dtype: [log]}\n",
                  "2:30: error: fp32_set_opt_dtype needs an argument 'ScalarType? dtype', and 'log' has none"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32_append_dtype: [mean]}\n",
                  "2:29: error: fp32_append_dtype: no overload of 'mean' takes the arguments of 'mean' plus a trailing "
                  "'ScalarType dtype'; name one with 'redispatch:'"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32_append_dtype: [{op: norm.Scalar, redispatch: norm.ScalarOpt_dim_dtype}]}\n",
                  "2:59: error: redispatch target 'norm.ScalarOpt_dim_dtype' does not take the arguments of 'norm.Scalar' "
                  "plus a trailing 'ScalarType dtype'"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32_append_dtype: [{op: norm.Scalar, redispatch: norm.nope}]}\n",
                  "2:59: error: unknown redispatch overload 'norm.nope'"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [{op: log, redispatch: exp}]}\n",
                  "2:26: error: 'redispatch:' is only meaningful in fp32_append_dtype, not in fp32"},
        ErrorCase{"autocast: {device: cuda}\nlists: {banned: [binary_cross_entropy]}\n",
                  "2:18: error: banned op 'binary_cross_entropy' needs a message for its users: write {op: "
                  "binary_cross_entropy, message: \"...\"}"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [{op: log, message: hi}]}\n",
                  "2:26: error: 'message:' is only meaningful in banned, not in fp32"},
        ErrorCase{"autocast: {device: cuda}\nlists: {banned: [{message: x}]}\n", "2:18: error: list entry has no 'op:' key"},
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [\"mm mm\"]}\n",
                  "2:17: error: malformed op name 'mm mm'; expected name, name.overload or name.* (optionally ns::name)"},
        ErrorCase{"autocast: {device: cuda}\nremove: [mm]\n", "2:10: error: 'remove:' drops inherited entries, but this policy extends nothing"},
        ErrorCase{"autocast: {device: cuda}\nextends: missing.yaml\n",
                  "2:10: error: cannot read extended policy 'missing.yaml': No such file or directory"},
        ErrorCase{"autocast: {device: cuda}\nextends: p.yaml\n", "2:10: error: 'extends:' cycle: p.yaml -> p.yaml"},
        ErrorCase{"autocast: {device: cuda}\nextends: \"p.yaml\\0.yaml\"\n",
                  "2:10: error: 'extends:' names a path holding a NUL byte, which no file can have"},
        ErrorCase{"autocast:\n\tdevice: cuda\n", "2:1: error: tab character in indentation; YAML allows only spaces"},
        // Note [precision by place]: entries' `modules:` and the `modules:` section.
        ErrorCase{"autocast: {device: cuda}\nlists: {fp32: [{op: log, modules: lm_head}]}\n",
                  "2:35: error: 'modules:' must be a list of module patterns such as [\"layers.*.attn\"], found a scalar"},
        ErrorCase{"autocast: {device: cuda}\nmodules: {lm_head: fp64}\n",
                  "2:20: error: unknown section value 'fp64' for 'lm_head' (expected fp32, off, float16, bfloat16 or {fp8: on|off})"},
        ErrorCase{"autocast: {device: cuda}\nmodules: {lm_head: half}\n",
                  "2:20: error: unknown section value 'half' for 'lm_head'; did you mean 'float16'?"},
        ErrorCase{"autocast: {device: cuda, lower_precision: [float16]}\nmodules: {lm_head: bfloat16}\n",
                  "2:20: error: 'lm_head: bfloat16' names a dtype that is not a lower-precision dtype of this policy "
                  "('lower_precision: [float16]'); write one of them, fp32 or off"},
        ErrorCase{"autocast: {device: cuda}\nmodules: {\"a\\u0001b\": off}\n",
                  "2:11: error: module pattern \"a\\x01b\" holds character U+0001; module paths have no whitespace or control characters"},
        ErrorCase{"autocast: {device: cuda\n", "2:1: error: invalid YAML: end of map flow not found"}));


}  // namespace
}  // namespace autocastgen::policy
