// autocastgen's own autocast state: AutocastScope nesting, restore on every exit path, the
// dispatch key it includes, and carrying the state into worker threads.
#include <future>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <gtest/gtest.h>

#include <autocastgen/runtime/cast_cache.h>
#include <autocastgen/runtime/state.h>

namespace {

using autocastgen::AutocastScope;

bool cpu_key_included() { return !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::AutocastCPU); }

TEST(State, OffByDefaultWithTheDeviceDefaultDtype) {
  EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kBFloat16);
  EXPECT_EQ(autocastgen::autocast_dtype(at::kCUDA), at::kHalf);
  EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 0u);
  EXPECT_FALSE(cpu_key_included());
}

TEST(State, ScopeTurnsOnAndRestores) {
  {
    const AutocastScope scope(at::kCPU, at::kHalf);
    EXPECT_TRUE(autocastgen::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kHalf);
    EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 1u);
    EXPECT_TRUE(cpu_key_included());
    EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCUDA)) << "devices are independent";
  }
  EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kBFloat16);
  EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 0u);
  EXPECT_FALSE(cpu_key_included());
}

TEST(State, NestedScopesInheritAndRestoreTheDtype) {
  const AutocastScope outer(at::kCPU, at::kHalf);
  {
    const AutocastScope inner(at::kCPU);
    EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kHalf) << "an inner scope without a dtype keeps the outer one";
    {
      const AutocastScope innermost(at::kCPU, at::kBFloat16);
      EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kBFloat16);
      EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 3u);
    }
    EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kHalf);
  }
  EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 1u);
}

TEST(State, DisabledScopeInsideAnEnabledOne) {
  const AutocastScope outer(at::kCPU);
  {
    const AutocastScope off(at::kCPU, AutocastScope::Options().disabled());
    EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 2u);
  }
  EXPECT_TRUE(autocastgen::is_autocast_enabled(at::kCPU));
  EXPECT_TRUE(cpu_key_included());
}

TEST(State, RestoresWhenAnExceptionLeavesTheScope) {
  try {
    const AutocastScope outer(at::kCPU, at::kHalf);
    const AutocastScope inner(at::kCPU, AutocastScope::Options().disabled().without_cache());
    throw std::runtime_error("leaving");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU));
  EXPECT_TRUE(autocastgen::is_autocast_cache_enabled(at::kCPU));
  EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 0u);
  EXPECT_FALSE(cpu_key_included());
}

TEST(State, KeepsAnEnclosingTorchAutocastKeyIncluded) {
  at::autocast::set_autocast_enabled(at::kCPU, true);
  {
    const AutocastScope ours(at::kCPU);
    const AutocastScope off(at::kCPU, AutocastScope::Options().disabled());
    EXPECT_TRUE(cpu_key_included()) << "torch.autocast is still on around the disabled scope";
  }
  EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
  at::autocast::set_autocast_enabled(at::kCPU, false);
}

TEST(State, RejectsBadDtypesAndDevicesWithoutChangingAnything) {
  EXPECT_THROW(AutocastScope(at::kCPU, at::kDouble), c10::Error);
  EXPECT_THROW(AutocastScope(at::kMeta), c10::Error);
  try {
    const AutocastScope scope(at::kCPU, at::kFloat);
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("bfloat16 or float16"), std::string::npos) << e.what();
  }
  EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 0u);
  EXPECT_FALSE(cpu_key_included());
}

TEST(State, NewThreadsStartOff) {
  const AutocastScope scope(at::kCPU, at::kHalf);
  std::thread([] {
    EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kBFloat16);
  }).join();
}

// pytorch #125186 / #132715: work handed to another thread ran in that thread's dtype. With the
// state captured on the submitting thread, the worker runs in exactly the submitter's dtype.
TEST(State, CapturedStateRunsInTheSubmittersDtype) {
  for (const at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    const AutocastScope scope(at::kCPU, dtype);
    auto task = autocastgen::with_autocast_state([] {
      return std::make_pair(autocastgen::is_autocast_enabled(at::kCPU), autocastgen::autocast_dtype(at::kCPU));
    });
    // The worker has a state of its own, which the task must not see and must get back.
    auto result = std::async(std::launch::async, [&] {
      const AutocastScope worker_own(at::kCPU, AutocastScope::Options().with_dtype(at::kHalf).disabled());
      const auto seen = task();
      EXPECT_FALSE(autocastgen::is_autocast_enabled(at::kCPU)) << "the worker's own state comes back";
      EXPECT_EQ(autocastgen::autocast_nesting(at::kCPU), 1u);
      return seen;
    }).get();
    EXPECT_TRUE(result.first);
    EXPECT_EQ(result.second, dtype);
  }
}

TEST(State, GuardIncludesTheKeyOnTheWorkerAndRestoresIt) {
  autocastgen::AutocastState captured;
  {
    const AutocastScope scope(at::kCPU, at::kHalf);
    captured = autocastgen::capture_autocast_state();
  }
  std::thread([&] {
    EXPECT_FALSE(cpu_key_included());
    {
      const autocastgen::AutocastStateGuard guard(captured);
      EXPECT_TRUE(cpu_key_included());
      EXPECT_EQ(autocastgen::autocast_dtype(at::kCPU), at::kHalf);
      // A scope opened under the borrowed state is not outermost: the cache outlives it.
      const at::Tensor w = at::randn({4, 4}).requires_grad_();
      { const AutocastScope inner(at::kCPU); (void)autocastgen::cached_cast(at::kHalf, w, at::kCPU); }
      EXPECT_EQ(autocastgen::cast_cache_size(at::kCPU), 1u);
    }
    EXPECT_FALSE(cpu_key_included());
    EXPECT_EQ(autocastgen::cast_cache_size(at::kCPU), 0u) << "the borrowed state's casts leave with it";
  }).join();
}

}  // namespace
