// Precision by place in the runtime (autocastgen/runtime/modules.h): globs, module frames, an
// entry's patterns, a policy's section, and what the drivers do with them.
#include <thread>

#include <ATen/ATen.h>
#include <ATen/ops/mm_ops.h>
#include <gtest/gtest.h>

#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/stats.h"
#include "autocastgen/torch/policy_call.h"

namespace {

using autocastgen::ModuleScope;
using namespace autocastgen::modules;
namespace rt = autocastgen::torch;

TEST(ModuleGlob, StarMatchesAnyRunDotsIncludedAndTheWholePathMustMatch) {
  EXPECT_TRUE(glob_matches("lm_head", "lm_head"));
  EXPECT_FALSE(glob_matches("lm_head", "lm_head.proj"));
  EXPECT_FALSE(glob_matches("head", "lm_head"));
  EXPECT_TRUE(glob_matches("layers.*.attn", "layers.3.attn"));
  EXPECT_TRUE(glob_matches("layers.*.attn", "layers.3.block.attn"));
  EXPECT_FALSE(glob_matches("layers.*.attn", "layers.3.attn.proj"));
  EXPECT_TRUE(glob_matches("encoder.*", "encoder.layer.0"));
  EXPECT_FALSE(glob_matches("encoder.*", "encoder"));
  EXPECT_TRUE(glob_matches("*", ""));
  EXPECT_TRUE(glob_matches("**a*", "xxa"));
  EXPECT_FALSE(glob_matches("", "a"));
  EXPECT_TRUE(glob_matches("", ""));
}

TEST(ModuleFrames, NestAndEndInnermostFirstPerThread) {
  EXPECT_EQ(current_path(), nullptr);
  {
    ModuleScope outer("layers.0");
    ASSERT_NE(current_path(), nullptr);
    EXPECT_EQ(*current_path(), "layers.0");
    {
      ModuleScope inner("layers.0.attn");
      EXPECT_EQ(*current_path(), "layers.0.attn");
      EXPECT_EQ(depth(), 2U);
      std::thread([] { EXPECT_EQ(current_path(), nullptr); }).join();
    }
    EXPECT_EQ(*current_path(), "layers.0");
  }
  EXPECT_EQ(depth(), 0U);
  // Python's frames: exit(depth) pops everything above it (a forward that raised leaves none).
  const size_t below = enter("a");
  enter("a.b");
  exit(below);
  EXPECT_EQ(depth(), 0U);
}

TEST(ModulePatterns, MatchTheInnermostFrameOrAnEnclosingOne) {
  const Patterns attn{{"layers.*.attn", "policy.yaml:3:24"}};
  EXPECT_FALSE(attn.match());
  ModuleScope layer("layers.1");
  EXPECT_FALSE(attn.match());
  {
    ModuleScope scope("layers.1.attn");
    EXPECT_TRUE(attn.match());
    ModuleScope proj("layers.1.attn.q_proj");  // enclosed by a matching module
    EXPECT_TRUE(attn.match());
  }
  EXPECT_FALSE(attn.match());
  // Registered while held, with where the policy wrote them.
  bool listed = false;
  for (const RegisteredPattern& p : registered_patterns())
    listed = listed || (p.pattern == "layers.*.attn" && p.where == "policy.yaml:3:24" && !p.section);
  EXPECT_TRUE(listed);
}

TEST(ModulePatterns, FramesEnteredBeforeARuleLoadsSeeIt) {
  ModuleScope scope("decoder.block");
  const Patterns late{{"decoder.*", "late.yaml:1:1"}};
  EXPECT_TRUE(late.match());
}

TEST(ModuleSections, InnermostMatchingModuleDecidesFirstListedAmongEqualMatches) {
  const Sections sections(c10::DeviceType::CPU, "test policy",
                          {{"lm_head", SectionKind::fp32, c10::ScalarType::Undefined, "p.yaml:2:3"},
                           {"encoder.*", SectionKind::off, c10::ScalarType::Undefined, "p.yaml:3:3"},
                           {"encoder.layer.2", SectionKind::dtype, c10::ScalarType::Half, "p.yaml:4:3"},
                           {"encoder.layer.*", SectionKind::fp32, c10::ScalarType::Undefined, "p.yaml:5:3"}});
  EXPECT_EQ(current_section(c10::DeviceType::CPU).kind, SectionKind::none);
  {
    ModuleScope head("lm_head");
    EXPECT_EQ(current_section(c10::DeviceType::CPU).kind, SectionKind::fp32);
    EXPECT_EQ(current_section(c10::DeviceType::CUDA).kind, SectionKind::none);  // another device's policy
  }
  ModuleScope encoder("encoder");
  EXPECT_EQ(current_section(c10::DeviceType::CPU).kind, SectionKind::none);  // encoder.* needs a dot after it
  {
    ModuleScope layer("encoder.layer.2");
    const Section section = current_section(c10::DeviceType::CPU);
    EXPECT_EQ(section.kind, SectionKind::off);  // the first listed of the three that match
  }
  {
    ModuleScope layer("encoder.layer.5");
    ModuleScope inner("encoder.layer.5.mlp");  // matches encoder.* too: the innermost decides
    EXPECT_EQ(current_section(c10::DeviceType::CPU).kind, SectionKind::off);
  }
}

TEST(ModuleSections, ADifferentSecondTableForADeviceIsRefusedAnEqualOneShared) {
  const std::vector<SectionRule> rules = {{"lm_head", SectionKind::fp32, c10::ScalarType::Undefined, "a.yaml:1:1"}};
  const Sections first(c10::DeviceType::CPU, "a.yaml", rules);
  {
    const Sections same(c10::DeviceType::CPU, "b.yaml", rules);
  }
  ModuleScope head("lm_head");
  EXPECT_EQ(current_section(c10::DeviceType::CPU).kind, SectionKind::fp32);  // still held by `first`
  try {
    const Sections other(c10::DeviceType::CPU, "c.yaml",
                         {{"lm_head", SectionKind::off, c10::ScalarType::Undefined, "c.yaml:1:1"}});
    FAIL() << "a second, different section was accepted";
  } catch (const c10::Error& error) {
    const std::string message = error.what_without_backtrace();
    EXPECT_NE(message.find("c.yaml gives device cpu a modules: section, but a.yaml gave it a different one"),
              std::string::npos)
        << message;
  }
}

// The drivers: a site of our own, the op called through at::_ops so no autocast kernel is involved.
const rt::Site kMm{c10::DeviceType::CPU, c10::DispatchKey::AutocastCPU, "aten::mm"};

at::Tensor lower_precision_mm(const at::Tensor& a, const at::Tensor& b) {
  return rt::lower_precision_fp<rt::OwnState>(kMm, at::_ops::mm::call, a, b);
}

TEST(ModuleSectionsInDrivers, Fp32AndOffLeaveCallsUntouchedADtypeReplacesTheLowerPrecision) {
  const at::Tensor a = at::randn({4, 4});
  const at::Tensor b = at::randn({4, 4});
  const Sections sections(c10::DeviceType::CPU, "drivers",
                          {{"head", SectionKind::fp32, c10::ScalarType::Undefined, "d.yaml:1:1"},
                           {"body", SectionKind::dtype, c10::ScalarType::Half, "d.yaml:2:1"}});
  const autocastgen::AutocastScope scope(c10::DeviceType::CPU, c10::ScalarType::BFloat16);
  EXPECT_EQ(lower_precision_mm(a, b).scalar_type(), at::kBFloat16);
  {
    ModuleScope head("head");
    EXPECT_EQ(lower_precision_mm(a, b).scalar_type(), at::kFloat);
    EXPECT_EQ(rt::lower_precision<rt::OwnState>(c10::DeviceType::CPU), at::kBFloat16);
  }
  {
    ModuleScope body("body");
    EXPECT_EQ(lower_precision_mm(a, b).scalar_type(), at::kHalf);
    EXPECT_EQ(rt::lower_precision<rt::OwnState>(c10::DeviceType::CPU), at::kHalf);
  }
  {
    // Sections change nothing while autocast is off.
    const autocastgen::AutocastScope off(c10::DeviceType::CPU, autocastgen::AutocastScope::Options().disabled());
    ModuleScope body("body");
    EXPECT_EQ(lower_precision_mm(a, b).scalar_type(), at::kFloat);
  }
}

TEST(ModuleStats, RowsPerModuleAndCallsInAnFp32SectionCountedAsRunUntouched) {
  autocastgen::stats::reset();
  const at::Tensor a = at::randn({4, 4});
  const Sections sections(c10::DeviceType::CPU, "stats",
                          {{"head", SectionKind::fp32, c10::ScalarType::Undefined, "s.yaml:1:1"}});
  {
    const autocastgen::stats::StatsScope counting;
    const autocastgen::AutocastScope scope(c10::DeviceType::CPU, c10::ScalarType::BFloat16);
    (void)lower_precision_mm(a, a);
    ModuleScope block("blocks.0");
    (void)lower_precision_mm(a, a);
    ModuleScope head("blocks.0.head");  // path matches no section: "head" alone does
    (void)lower_precision_mm(a, a);
  }
  {
    const autocastgen::stats::StatsScope counting;
    const autocastgen::AutocastScope scope(c10::DeviceType::CPU, c10::ScalarType::BFloat16);
    ModuleScope head("head");
    (void)lower_precision_mm(a, a);
  }
  const std::string json = autocastgen::stats::snapshot_json();
  EXPECT_NE(json.find("\"op\": \"aten::mm\", \"policy\": \"lower_precision_fp\", \"calls\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"module\": \"blocks.0\", \"calls\": 1, \"ran_in\": {\"bfloat16\": 1}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"module\": \"blocks.0.head\", \"calls\": 1, \"ran_in\": {\"bfloat16\": 1}"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"module\": \"head\", \"calls\": 1, \"ran_in\": {\"float32\": 1}"), std::string::npos) << json;
  autocastgen::stats::reset();
}

}  // namespace
