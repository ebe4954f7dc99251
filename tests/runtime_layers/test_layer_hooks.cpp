// What replaced the runtime's calls up the layers (Note [runtime layers] in runtime/CMakeLists.txt)
// still does what the calls did: the state's scope end drops fp8's weight copies through the hook
// fp8 registers at load (Note [caches of a scope]), and the switch word's writers keep each
// other's bits (Note [one switch word]).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/switches.h"

namespace {

constexpr c10::DeviceType kCpu = c10::DeviceType::CPU;

TEST(ScopeCaches, TheOutermostScopeEndDropsFp8WeightCopiesThroughTheHook) {
  at::manual_seed(0);
  const at::Tensor w = (at::randn({32, 64}) * 0.1).requires_grad_(true);
  const at::Tensor x = at::randn({16, 64});
  if (!autocastgen::fp8::fp8_linear_support(x, w, std::nullopt, at::kBFloat16))
    GTEST_SKIP() << "this PyTorch runs no fp8 GEMM on the CPU";
  autocastgen::fp8::clear_weight_cache(kCpu);
  // As if a torch.autocast were open around our scopes: PyTorch's cast cache (and the weight
  // cache's sentinel in it, Note [PyTorch's scope end]) then outlives them, so only the state's
  // own scope end can drop the copies.
  at::autocast::increment_nesting();
  {
    const autocastgen::AutocastScope outer(kCpu, autocastgen::AutocastScope::Options().with_dtype(at::kBFloat16));
    {
      const autocastgen::AutocastScope inner(kCpu, autocastgen::AutocastScope::Options().with_dtype(at::kBFloat16));
      (void)autocastgen::fp8::fp8_linear(x, w, std::nullopt, autocastgen::fp8::Recipe{}, at::kBFloat16);
    }
    EXPECT_EQ(autocastgen::fp8::weight_cache_stats(kCpu).entries, 1U) << "an inner scope's end keeps the copies";
  }
  EXPECT_EQ(autocastgen::fp8::weight_cache_stats(kCpu).entries, 0U) << "the outermost scope's end drops them";
  at::autocast::decrement_nesting();
  at::autocast::clear_cache();
}

TEST(SwitchWord, EachWriterKeepsTheOtherWritersBits) {
  namespace sw = autocastgen::stats::detail;
  ASSERT_EQ(sw::active(), 0U);
  sw::set_switches(sw::kModules, sw::kModules);  // as module sections do when the first loads
  autocastgen::stats::enable();
  EXPECT_EQ(sw::active(), sw::kModules | sw::kCounting);
  autocastgen::stats::disable();
  EXPECT_EQ(sw::active(), sw::kModules) << "the statistics' publish kept kModules";
  autocastgen::stats::enable();
  sw::set_switches(sw::kModules, 0U);
  EXPECT_EQ(sw::active(), sw::kCounting) << "the module rules' update kept the statistics' bit";
  autocastgen::stats::disable();
  EXPECT_EQ(sw::active(), 0U);
}

}  // namespace
