// The thread-local cast cache (Note [cast cache]): what is cached, for how long, that a freed
// weight never returns a stale cast, that casts keep autograd history, and that memory stays flat.
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <autocastgen/runtime/cast_cache.h>
#include <autocastgen/runtime/state.h>

namespace {

using autocastgen::AutocastScope;
using autocastgen::cached_cast;
using autocastgen::cast_cache_size;

at::Tensor weight(int64_t n = 8) { return at::randn({n, n}).requires_grad_(); }

TEST(CastCache, CachesAWeightUntilTheOutermostScopeEnds) {
  const at::Tensor w = weight();
  {
    const AutocastScope outer(at::kCPU);
    at::Tensor first;
    {
      const AutocastScope inner(at::kCPU);
      first = cached_cast(at::kBFloat16, w, at::kCPU);
      EXPECT_EQ(first.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(first.equal(w.to(at::kBFloat16)));
    }
    EXPECT_EQ(cast_cache_size(at::kCPU), 1u) << "an inner scope's end keeps the cache";
    const at::Tensor second = cached_cast(at::kBFloat16, w, at::kCPU);
    EXPECT_TRUE(second.is_same(first)) << "a hit returns the cached tensor itself";
  }
  EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
}

TEST(CastCache, CachesOnlyFloat32LeavesThatRequireGradToTheLowerPrecisionDtype) {
  const AutocastScope scope(at::kCPU, at::kBFloat16);
  const at::Tensor activation = at::randn({4, 4});                          // no grad
  const at::Tensor non_leaf = weight() * 2;                                  // not a leaf
  const at::Tensor half_weight = at::randn({4, 4}, at::kHalf).requires_grad_();  // not float32
  const at::Tensor w = weight();
  const at::Tensor view = w.detach().requires_grad_().view({64});          // a view leaf
  for (const at::Tensor& t : {activation, non_leaf, half_weight, view}) (void)cached_cast(at::kBFloat16, t, at::kCPU);
  EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
  (void)cached_cast(at::kFloat, w, at::kCPU);  // to float32 is no cast at all
  (void)cached_cast(at::kHalf, w, at::kCPU);   // not the scope's lower-precision dtype
  EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
  (void)cached_cast(at::kBFloat16, w, at::kCPU);
  EXPECT_EQ(cast_cache_size(at::kCPU), 1u);
}

TEST(CastCache, PassesIneligibleTensorsThrough) {
  const AutocastScope scope(at::kCPU);
  const at::Tensor ints = at::arange(4);
  const at::Tensor doubles = at::randn({2}, at::kDouble);
  const at::Tensor undefined;
  EXPECT_TRUE(cached_cast(at::kBFloat16, ints, at::kCPU).is_same(ints));
  EXPECT_TRUE(cached_cast(at::kBFloat16, doubles, at::kCPU).is_same(doubles));
  EXPECT_FALSE(cached_cast(at::kBFloat16, undefined, at::kCPU).defined());
  const at::Tensor meta = at::empty({2}, at::TensorOptions().device(at::kMeta));
  EXPECT_TRUE(cached_cast(at::kBFloat16, meta, at::kCPU).is_same(meta)) << "not on the policy's device";
}

TEST(CastCache, NothingCachedOutsideAScopeWithTheCacheOffOrInInferenceMode) {
  const at::Tensor w = weight();
  EXPECT_EQ(cached_cast(at::kBFloat16, w, at::kCPU).scalar_type(), at::kBFloat16);
  EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
  {
    const AutocastScope scope(at::kCPU, AutocastScope::Options().without_cache());
    (void)cached_cast(at::kBFloat16, w, at::kCPU);
    EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
  }
  {
    const AutocastScope scope(at::kCPU);
    const c10::InferenceMode inference;
    (void)cached_cast(at::kBFloat16, w, at::kCPU);
    EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
  }
}

// pytorch #158232: a weight first cast under no_grad was cached without autograd history, and the
// next use with grad on got a cast that no gradient could flow through.
TEST(CastCache, ACastMadeUnderNoGradStillRecordsHistory) {
  const at::Tensor w = weight(4);
  const AutocastScope scope(at::kCPU);
  {
    const at::NoGradGuard no_grad;
    (void)cached_cast(at::kBFloat16, w, at::kCPU);
  }
  const at::Tensor cast = cached_cast(at::kBFloat16, w, at::kCPU);
  ASSERT_TRUE(cast.requires_grad());
  ASSERT_NE(cast.grad_fn(), nullptr);
  cast.to(at::kFloat).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().equal(at::ones_like(w)));
}

// Note [cast cache]: a freed weight's address may be handed to the next tensor; the cache must
// never answer for the new tensor with the old one's cast.
TEST(CastCache, AFreedWeightNeverReturnsAStaleCast) {
  const AutocastScope scope(at::kCPU);
  for (int i = 0; i < 200; ++i) {
    const at::Tensor w = at::full({16}, static_cast<float>(i)).requires_grad_();
    const at::Tensor cast = cached_cast(at::kBFloat16, w, at::kCPU);
    ASSERT_EQ(cast[0].item<float>(), static_cast<float>(i)) << "iteration " << i << " got another weight's cast";
    ASSERT_TRUE(cast.equal(w.detach().to(at::kBFloat16)));
  }
}

// A long scope that creates and drops weights: the cache keeps O(live weights) entries and the
// memory they hold stays flat.
TEST(CastCache, DroppedWeightsDoNotAccumulate) {
  const AutocastScope scope(at::kCPU);
  const at::Tensor kept = weight(64);
  size_t largest = 0;
  for (int i = 0; i < 20000; ++i) {
    const at::Tensor w = weight(64);  // 16 KiB of float32, 8 KiB cast
    (void)cached_cast(at::kBFloat16, w, at::kCPU);
    (void)cached_cast(at::kBFloat16, kept, at::kCPU);
    largest = std::max(largest, cast_cache_size(at::kCPU));
  }
  // Sweeps run whenever the map doubles since the last one, from 64 entries: bounded, not 20000.
  EXPECT_LE(largest, 128u);
  EXPECT_GE(cast_cache_size(at::kCPU), 1u) << "the live weight stays cached";
}

TEST(CastCache, EachThreadHasItsOwnCache) {
  const at::Tensor w = weight();
  const AutocastScope scope(at::kCPU);
  const at::Tensor here = cached_cast(at::kBFloat16, w, at::kCPU);
  std::thread([&] {
    EXPECT_EQ(cast_cache_size(at::kCPU), 0u);
    const AutocastScope worker(at::kCPU);
    const at::Tensor there = cached_cast(at::kBFloat16, w, at::kCPU);
    EXPECT_FALSE(there.is_same(here));
    EXPECT_TRUE(there.equal(here));
  }).join();
  EXPECT_EQ(cast_cache_size(at::kCPU), 1u);
}

// Note [data stamps]: inside one scope, a weight whose data changed without the usual in-place op
// is cast again, one test per way; each new cast is the new data's, bit for bit.
class CastCacheSeesChangedData : public ::testing::Test {
 protected:
  const at::Tensor w = weight(16);
  const AutocastScope scope{at::kCPU};
  at::Tensor first = cached_cast(at::kBFloat16, w, at::kCPU);

  void expect_recast(const char* way) {
    const at::Tensor again = cached_cast(at::kBFloat16, w, at::kCPU);
    EXPECT_FALSE(again.is_same(first)) << way << ": the stale cast was served";
    EXPECT_TRUE(again.equal(w.detach().to(at::kBFloat16))) << way;
    EXPECT_TRUE(cached_cast(at::kBFloat16, w, at::kCPU).is_same(again)) << way << ": the new cast is cached";
  }
};

TEST_F(CastCacheSeesChangedData, CopyUnderNoGrad) {
  {
    const at::NoGradGuard no_grad;
    w.copy_(at::randn({16, 16}));
  }
  expect_recast("copy_ under no_grad");
}

TEST_F(CastCacheSeesChangedData, DataAssignment) {
  w.set_data(at::randn({16, 16}));  // `param.data = ...`: another storage, the same version counter
  expect_recast(".data =");
}

TEST_F(CastCacheSeesChangedData, DataAssignmentOfAnotherShape) {
  w.set_data(at::randn({8, 32}));
  expect_recast(".data = another shape");
}

TEST_F(CastCacheSeesChangedData, SetToAnotherStorage) {
  const at::Tensor other = at::randn({16, 16});
  {
    const at::NoGradGuard no_grad;
    w.set_(other);
  }
  expect_recast("set_");
}

TEST_F(CastCacheSeesChangedData, StorageResizedAndRefilledThroughAnAlias) {
  // FSDP2's free and refill: the storage is resized in place, then written through another tensor
  // over it, which has a version counter of its own. Here the size differs, which the stamp sees;
  // a refill of the same size at the same address is seen when the scope ends (Note [data stamps]).
  const int64_t version = w._version();
  at::native::resize_bytes_cpu(w.storage().unsafeGetStorageImpl(), 2 * w.storage().nbytes());
  at::Tensor alias = at::empty({0});
  {
    const at::NoGradGuard no_grad;
    alias.set_(w.storage(), 0, {16, 16}, {16, 1});
    alias.copy_(at::randn({16, 16}));
  }
  EXPECT_EQ(w._version(), version) << "the weight's version counter did not move";
  expect_recast("storage resized and refilled");
}

TEST(CastCache, KeysByDtype) {
  const at::Tensor w = weight();
  const AutocastScope outer(at::kCPU, at::kBFloat16);
  EXPECT_EQ(cached_cast(at::kBFloat16, w, at::kCPU).scalar_type(), at::kBFloat16);
  const AutocastScope inner(at::kCPU, at::kHalf);
  EXPECT_EQ(cached_cast(at::kHalf, w, at::kCPU).scalar_type(), at::kHalf) << "not the bfloat16 entry";
  EXPECT_EQ(cast_cache_size(at::kCPU), 2u);
}

}  // namespace
