// Release numbers, the op history, and release-gated policy entries (Note [release gates]).
#include <gtest/gtest.h>

#include <sstream>

#include "model/op_history.h"
#include "model/torch_version.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "schema/schema_file.h"

namespace autocastgen {
namespace {

using model::OpHistory;
using model::TorchVersion;

TEST(TorchVersion, ParsesMajorMinorAndPatch) {
  EXPECT_EQ(TorchVersion::parse("2.4")->str(), "2.4");
  EXPECT_EQ(TorchVersion::parse("2.4.1")->str(), "2.4.1");
  EXPECT_EQ(TorchVersion::parse("1.13")->minor(), 13);
  for (const char* bad : {"", "2", "2.", ".4", "2.x", "2.04", "02.4", "2.4.", "2.4.1.2", "2.4 ", "v2.4", "2.4+cu121", "-2.4"})
    EXPECT_FALSE(TorchVersion::parse(bad).has_value()) << bad;
}

TEST(TorchVersion, ReadsWhatTorchReports) {
  EXPECT_EQ(TorchVersion::parse_reported("2.15.0+cu132")->str(), "2.15.0");
  EXPECT_EQ(TorchVersion::parse_reported(" '2.4.1a0+git3f1b2c'")->str(), "2.4.1");
  EXPECT_EQ(TorchVersion::parse_reported("1.13.1")->str(), "1.13.1");
  EXPECT_FALSE(TorchVersion::parse_reported("unknown").has_value());
}

TEST(TorchVersion, ComparesMinorReleasesNumerically) {
  EXPECT_LT(*TorchVersion::parse("2.9"), *TorchVersion::parse("2.10"));
  EXPECT_LT(*TorchVersion::parse("1.13"), *TorchVersion::parse("2.0"));
  EXPECT_EQ(*TorchVersion::parse("2.4"), *TorchVersion::parse("2.4.1"));  // gates compare minor releases
  EXPECT_TRUE(model::is_supported_release(*TorchVersion::parse("1.13")));
  EXPECT_TRUE(model::is_supported_release(*TorchVersion::parse("2.15.0")));
  EXPECT_FALSE(model::is_supported_release(*TorchVersion::parse("1.12")));
  EXPECT_FALSE(model::is_supported_release(*TorchVersion::parse("2.16")));
  EXPECT_FALSE(model::is_supported_release(*TorchVersion::parse("3.0")));
}

TEST(OpHistory, ParsesSpansAndUnitesOverloadsPerOp) {
  std::string error;
  const std::optional<OpHistory> history = OpHistory::parse(
      "# comment\naten::prod 1.13 2.15\naten::prod.dim_Dimname 1.13 2.12\naten::rms_norm 2.4 2.15\naten::x.y 2.2 2.3\n", error);
  ASSERT_TRUE(history) << error;
  EXPECT_EQ(history->overload("aten::prod.dim_Dimname")->str(), "1.13-2.12");
  EXPECT_EQ(history->op("aten", "x")->str(), "2.2-2.3");
  EXPECT_EQ(history->op("aten", "prod")->str(), "1.13-2.15");
  EXPECT_FALSE(history->overload("aten::prod.nope").has_value());
  EXPECT_TRUE(history->overload("aten::rms_norm")->contains(*TorchVersion::parse("2.4")));
  EXPECT_FALSE(history->overload("aten::rms_norm")->contains(*TorchVersion::parse("2.3")));
}

TEST(OpHistory, RejectsMalformedLinesWithTheirNumber) {
  for (const char* bad : {"aten::mm 2.4\n", "mm 2.4 2.5\n", "aten::mm 2.5 2.4\n", "aten::mm 2.4 2.5 extra\n", "aten::mm 2.x 2.5\n"}) {
    std::string error;
    EXPECT_FALSE(OpHistory::parse(std::string("# header\n") + bad, error).has_value()) << bad;
    EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  }
}

TEST(OpHistory, BuiltinCoversEverySupportedRelease) {
  const OpHistory& history = OpHistory::builtin();
  ASSERT_FALSE(history.empty());
  EXPECT_EQ(history.overload("aten::mm")->str(), "1.13-2.15");
  EXPECT_EQ(history.overload("aten::rms_norm")->first, TorchVersion(2, 4));
}

// Resolution against the schema fixture, targeting a given release.
class GateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    const uint32_t file = *sources_.add_file(std::string(AUTOCASTGEN_TEST_DATA) + "/schemas/mini_native_functions.yaml", error);
    DiagnosticEngine diags(sources_, messages_);
    schemas_ = schema::load_schema_files({file}, sources_, diags);
    ASSERT_TRUE(schemas_);
  }

  std::optional<policy::ResolvedPolicy> resolve(const std::string& text, std::optional<TorchVersion> release) {
    DiagnosticEngine diags(sources_, messages_);
    const uint32_t file = sources_.add_buffer("policy.yaml", text);
    std::optional<policy::PolicyFile> parsed = policy::parse_policy_file(sources_, file, diags);
    if (!parsed) return std::nullopt;
    return policy::resolve_policy({*parsed}, *schemas_, diags, {release});
  }

  SourceManager sources_;
  std::ostringstream messages_;
  std::optional<model::SchemaSet> schemas_;
};

constexpr const char* kGated = R"(autocast: {device: cuda}
lists:
  fp32:
    - {op: log, since: "2.5"}
    - {op: exp, until: "2.5"}
    - {op: relu, since: "2.4", until: "2.6"}
)";

std::vector<std::string> ops(const policy::ResolvedPolicy& resolved) {
  std::vector<std::string> out;
  for (const auto& e : resolved.entries) out.push_back(e.schema->name().display());
  return out;
}

TEST_F(GateTest, SinceIsInclusiveAndUntilExclusive) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ops(*resolve(kGated, TorchVersion(2, 4))), (V{"exp", "relu"}));
  EXPECT_EQ(ops(*resolve(kGated, TorchVersion(2, 5, 1))), (V{"log", "relu"}));
  EXPECT_EQ(ops(*resolve(kGated, TorchVersion(2, 6))), (V{"log"}));
  EXPECT_EQ(ops(*resolve(kGated, TorchVersion(1, 13))), (V{"exp"}));
}

TEST_F(GateTest, SkippedEntriesSayWhy) {
  const auto resolved = resolve(kGated, TorchVersion(2, 6));
  ASSERT_TRUE(resolved);
  ASSERT_EQ(resolved->skipped.size(), 2u);
  EXPECT_EQ(resolved->skipped[0].op, "exp");
  EXPECT_EQ(resolved->skipped[0].reason, "until 2.5");
  EXPECT_EQ(resolved->skipped[1].reason, "since 2.4, until 2.6");
  EXPECT_EQ(resolved->torch_version, TorchVersion(2, 6));
}

TEST_F(GateTest, GatesNeedATargetRelease) {
  EXPECT_FALSE(resolve(kGated, std::nullopt));
  EXPECT_NE(messages_.str().find("the target PyTorch release is unknown; pass --torch-version"), std::string::npos)
      << messages_.str();
  // Ungated policies resolve without one.
  EXPECT_TRUE(resolve("autocast: {device: cuda}\nlists: {fp32: [log]}\n", std::nullopt));
}

}  // namespace
}  // namespace autocastgen
