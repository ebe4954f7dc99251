// Precision by place in a generated library of the autocastgen state (data/places.yaml): the
// C++ ModuleScope a libtorch model uses, an entry's `modules:` in the wrapper's condition, and
// the section the generated file registers. Loading is irreversible: one test, in order.
#include <dlfcn.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <autocastgen/runtime/modules.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>

namespace {

TEST(PlacesLibrary, ModuleScopeDrivesEntriesAndSections) {
  const at::Tensor x = at::randn({4, 4});
  using autocastgen::AutocastScope;
  using autocastgen::ModuleScope;
  ASSERT_NE(dlopen(AUTOCASTGEN_PLACES_LIBRARY, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  bool section_listed = false;
  for (const autocastgen::modules::RegisteredPattern& p : autocastgen::modules::registered_patterns())
    section_listed = section_listed || (p.pattern == "body.*" && p.section && p.where.find("places.yaml:13:") != std::string::npos);
  EXPECT_TRUE(section_listed) << "the generated file registers its section with the policy's file:line:col";

  const AutocastScope scope(at::kCPU, at::kBFloat16);
  EXPECT_EQ(at::mm(x, x).scalar_type(), at::kBFloat16) << "outside every module: the lists";
  {
    const ModuleScope layer("layers.0");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kBFloat16);
    const ModuleScope attn("layers.0.attn");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat) << "the module-scoped entry wins inside *.attn";
    EXPECT_EQ(at::addmm(x, x, x).scalar_type(), at::kBFloat16) << "other ops: the lists";
  }
  {
    const ModuleScope head("head");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat) << "fp32 section: autocast off inside";
    const at::Tensor low = x.to(at::kBFloat16);
    EXPECT_EQ(at::mm(low, low).scalar_type(), at::kBFloat16) << "off means untouched, not cast to float32";
  }
  {
    const ModuleScope body("body.block");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kHalf) << "dtype section: float16 inside";
    const ModuleScope attn("body.block.attn");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat) << "an entry's modules: inside a dtype section";
  }
  {
    const AutocastScope off(at::kCPU, AutocastScope::Options().disabled());
    const ModuleScope body("body.block");
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat) << "sections change nothing while autocast is off";
  }
}

}  // namespace
