// Note [claiming the key]: a library generated with --state autocastgen (here from the partial
// policy data/mm_only.yaml) follows AutocastScope for its ops, and the ops PyTorch registers on
// AutocastCPU that the policy leaves out run untouched once it is loaded, except ops that carry a
// runtime policy. Loading is irreversible, so every step is one test, in order.
#include <dlfcn.h>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <autocastgen/runtime/runtime_policy.h>
#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>

namespace {

TEST(OwnStateLibrary, ClaimsItsKeyAndFollowsAutocastScope) {
  const at::Tensor x = at::randn({4, 4});
  const at::Tensor w = at::randn({2, 1, 3, 3});
  const at::Tensor image = at::randn({1, 1, 5, 5});
  using autocastgen::AutocastScope;

  // Before: the scope includes AutocastCPU, so PyTorch's own kernel handles conv2d, in the dtype
  // the scope asked for (Note [own scopes and PyTorch's state]).
  {
    const AutocastScope scope(at::kCPU, at::kHalf);
    EXPECT_EQ(at::conv2d(image, w).scalar_type(), at::kHalf);
  }
  // A runtime policy given before the library loads stays in force after it.
  autocastgen::register_runtime_policy("aten::addmm", "fp32", "cpu");

  ASSERT_NE(dlopen(AUTOCASTGEN_MM_ONLY_LIBRARY, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
  auto& trace = autocastgen::torch::wrapper_trace();
  {
    const AutocastScope scope(at::kCPU, at::kHalf);
    trace.last_op = nullptr;
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kHalf) << "the generated wrapper, in the scope's dtype";
    EXPECT_STREQ(trace.last_op, "aten::mm");
    EXPECT_EQ(at::conv2d(image, w).scalar_type(), at::kFloat) << "outside the policy: falls through";
    const at::Tensor low = x.to(at::kHalf);
    EXPECT_EQ(at::addmm(low, low, low).scalar_type(), at::kFloat) << "the runtime policy survived the claim";
    const AutocastScope off(at::kCPU, AutocastScope::Options().disabled());
    EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat) << "a disabled scope: the wrapper calls through";
  }
  // PyTorch's autocast state alone does not drive an autocastgen-state library.
  at::autocast::set_autocast_enabled(at::kCPU, true);
  EXPECT_EQ(at::mm(x, x).scalar_type(), at::kFloat);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  autocastgen::clear_runtime_policies();
}

}  // namespace
