// Note [cast cache]
// Autocast casts each weight once per forward pass instead of once per use: a float32 leaf that
// requires grad, cast to the lower-precision dtype, is kept until the device's outermost
// AutocastScope ends. The cache is per thread (and per device type): the hit path takes no lock
// and touches no shared cache line. Threads sharing weights each cast them once; that costs one
// copy per thread and scope, which is what a lock-free hit buys (docs/runtime.md).
//
// Entries hold a weak reference to the source. While an entry exists the source's TensorImpl
// cannot be freed (a weak reference keeps the object's memory), so its address cannot be reused
// by a new tensor and a lookup can never return another tensor's cast. And it serves a cast only
// while the source still holds the data it was cast from (Note [data stamps] in data_stamp.h): a
// weight changed inside a scope is cast again, and its stale entry counts as an eviction.
//
// The cast itself keeps the source alive, though: its grad_fn leads to the source's
// AccumulateGrad node, which holds the source. So "dead" means unreachable except through that
// chain: only our cast's graph holds the AccumulateGrad, and only the AccumulateGrad holds the
// source. Dead entries are swept whenever the map has doubled since the last sweep, so a long
// scope that creates and drops weights keeps the cache at O(live weights).
#include "autocastgen/runtime/cast_cache.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include "autocastgen/runtime/state.h"
#include "state_internal.h"
#include "../data_stamp.h"
#include "../device_types.h"

namespace autocastgen {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

struct CacheKey {
  const c10::TensorImpl* source;
  c10::ScalarType dtype;
  bool operator==(const CacheKey& other) const { return source == other.source && dtype == other.dtype; }
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& key) const {
    return std::hash<const void*>()(key.source) ^ (static_cast<size_t>(key.dtype) << 1U);
  }
};

struct CacheEntry {
  WeakImpl source;
  DataStamp stamp;
  at::Tensor cast;
};

class DeviceCache {
 public:
  // `evicted` counts the entries dropped (for the statistics' cache_evictions).
  const at::Tensor* find(const CacheKey& key, const at::Tensor& source, uint64_t& evicted) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    if (it->second.source.expired() || !it->second.stamp.matches(source)) {
      entries_.erase(it);
      ++evicted;
      return nullptr;
    }
    return &it->second.cast;
  }

  void insert(const CacheKey& key, const at::Tensor& source, at::Tensor cast, uint64_t& evicted) {
    if (entries_.size() >= sweep_at_) evicted += sweep();
    entries_.insert_or_assign(key, CacheEntry{WeakImpl(source.getIntrusivePtr()), DataStamp(source), std::move(cast)});
  }

  [[nodiscard]] size_t size() const { return entries_.size(); }
  void clear() {
    entries_.clear();
    sweep_at_ = kMinSweep;
  }

 private:
  static constexpr size_t kMinSweep = 64;

  size_t sweep() {
    const size_t before = entries_.size();
    for (auto it = entries_.begin(); it != entries_.end();) it = is_dead(it->second) ? entries_.erase(it) : std::next(it);
    sweep_at_ = std::max(kMinSweep, 2 * entries_.size());
    return before - entries_.size();
  }

  static bool is_dead(const CacheEntry& entry) {
    if (entry.source.expired()) return true;
    const at::Tensor source(entry.source.lock());  // one reference of ours
    // std::shared_ptr<Node> up to PyTorch 2.12, c10::intrusive_ptr<Node> from 2.13: both count
    // strong references the same way here.
    const auto accumulator = ::torch::autograd::impl::try_get_grad_accumulator(source);
    if (!accumulator) return source.use_count() == 1;
    // The accumulator: ours here plus the edge from our cast's grad_fn; the source: ours here plus
    // the accumulator's. Anything more is a user (or another graph) still holding on.
    return accumulator.use_count() == 2 && source.use_count() == 2;
  }

  ska::flat_hash_map<CacheKey, CacheEntry, CacheKeyHash> entries_;
  size_t sweep_at_ = kMinSweep;
};


DeviceCache& thread_cache(c10::DeviceType device) {
  thread_local std::array<DeviceCache, kDeviceTypes> caches;
  return caches.at(static_cast<size_t>(device));
}

// A weight, inside a scope: what autocast may cast once and reuse until the scope ends. The
// tensor's own properties are checked first; they need no thread-local lookup.
bool is_cacheable(const at::Tensor& tensor, c10::ScalarType to, c10::DeviceType device) {
  if (tensor.scalar_type() != at::kFloat || !tensor.requires_grad() || !tensor.is_leaf() || tensor.is_view()) return false;
  // A traced tensor (Note [reads while tracing] in traced.cpp) is not kept: the cache would hold a
  // trace's FakeTensor past the trace, and a compiled graph must cast at every call anyway.
  if (detail::is_traced(tensor)) return false;
  const DeviceAutocastState& state = detail::thread_device_state(device);
  // Inside a scope the dtype is always concrete (AutocastScope resolves the default).
  return state.nesting > 0 && state.cache_enabled && to == state.dtype && !c10::InferenceMode::is_enabled();
}

using detail::CastOutcome;

at::Tensor cast_with_outcome(c10::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                             CastOutcome& outcome, uint64_t& evicted) {
  outcome = CastOutcome::none;
  // Note [eligible argument] (policy_call.h): PyTorch's test, as the drivers' is_eligible.
  if (!at::autocast::is_eligible(tensor, device) || tensor.scalar_type() == to) return tensor;
  outcome = CastOutcome::cast;
  if (!is_cacheable(tensor, to, device)) return tensor.to(to);
  DeviceCache& cache = thread_cache(device);
  const CacheKey key{tensor.unsafeGetTensorImpl(), to};
  if (const at::Tensor* hit = cache.find(key, tensor, evicted)) {
    outcome = CastOutcome::hit;
    return *hit;
  }
  // The cached cast outlives this call and may be reused with grad mode on: it must record
  // autograd history even when this call runs under no_grad (pytorch #158232).
  at::Tensor cast;
  {
    const c10::AutoGradMode grad_on(true);
    cast = tensor.to(to);
  }
  cache.insert(key, tensor, cast, evicted);
  outcome = CastOutcome::miss;
  return cast;
}

}  // namespace

at::Tensor cached_cast(c10::ScalarType to, const at::Tensor& tensor, c10::DeviceType device) {
  CastOutcome outcome{};
  uint64_t evicted = 0;
  return cast_with_outcome(to, tensor, device, outcome, evicted);
}

at::Tensor detail::cached_cast_with_outcome(c10::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                            CastOutcome& outcome, uint64_t& evicted) {
  return cast_with_outcome(to, tensor, device, outcome, evicted);
}

size_t cast_cache_size(c10::DeviceType device) { return thread_cache(device).size(); }

void clear_cast_cache(c10::DeviceType device) { thread_cache(device).clear(); }

}  // namespace autocastgen
