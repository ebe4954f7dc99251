// Note [fp8 weight cache]
// A weight used many times in one autocast scope (a shared embedding, a layer applied in a loop,
// gradient accumulation's micro-batches in one scope) is quantised once: its fp8 copy and inverse
// scale are kept until the glue calls clear_weight_cache() when the outermost scope ends. Like
// the cast cache (Note [cast cache] in cast_cache.cpp) it is per thread and per device type, so a
// hit takes no lock, and entries hold a weak reference to the weight, so its TensorImpl (not its
// storage) outlives the entry and its address cannot be reused by another tensor while the entry
// exists.
//
// Unlike a cast, the fp8 copy has no autograd history (gradients flow to the weight through the
// fp8 GEMM's own backward), so nothing in an entry keeps the weight alive: "dead" is simply
// "the weak reference expired". Dead entries are swept whenever the map has doubled since the
// last sweep.
//
// An entry is only valid for the weight's current contents: it records the weight's version
// counter, which every in-place op bumps (an optimizer step under no_grad included), and its
// data pointer (`param.data = ...` swaps the storage without a version bump). A changed weight is
// re-quantised and its entry replaced. Changes through a `.data` alias of the weight share the
// storage but not the version counter and are not seen, as autograd does not see them either.
#include "weight_cache.h"

#include <algorithm>
#include <array>
#include <functional>

#include <c10/util/flat_hash_map.h>

#include "autocastgen/fp8/fp8.h"
#include "../device_types.h"

namespace autocastgen::fp8 {
namespace detail {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

struct KeyHash {
  std::size_t operator()(const WeightCacheKey& k) const {
    std::size_t h = std::hash<const void*>()(k.weight);
    h ^= (static_cast<std::size_t>(k.fp8) << 1) ^ (static_cast<std::size_t>(k.scaling) << 9) ^
         (static_cast<std::size_t>(k.margin) << 11) ^ (static_cast<std::size_t>(k.inference) << 19);
    return h;
  }
};

struct Entry {
  WeakImpl weight;
  std::int64_t version = 0;
  const void* data = nullptr;
  Quantized q;
};

class DeviceCache {
 public:
  const Quantized* find(const WeightCacheKey& key, const at::Tensor& weight) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    if (it->second.weight.expired() || it->second.version != weight._version() ||
        it->second.data != weight.const_data_ptr()) {
      entries_.erase(it);
      return nullptr;
    }
    ++stats_.hits;
    return &it->second.q;
  }

  void insert(const WeightCacheKey& key, const at::Tensor& weight, const Quantized& q) {
    if (entries_.size() >= sweep_at_) sweep();
    entries_.insert_or_assign(key, Entry{WeakImpl(weight.getIntrusivePtr()),
                                         weight._version(), weight.const_data_ptr(), q});
  }

  void clear() {
    entries_.clear();
    sweep_at_ = kMinSweep;
  }

  CacheStats stats() const {
    CacheStats s = stats_;
    s.entries = entries_.size();
    return s;
  }
  void count_quantization() { ++stats_.quantizations; }
  void reset_stats() { stats_ = {}; }

 private:
  static constexpr std::size_t kMinSweep = 64;

  void sweep() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.weight.expired() ? entries_.erase(it) : std::next(it);
    }
    sweep_at_ = std::max(kMinSweep, 2 * entries_.size());
  }

  ska::flat_hash_map<WeightCacheKey, Entry, KeyHash> entries_;
  std::size_t sweep_at_ = kMinSweep;
  CacheStats stats_;
};


DeviceCache& thread_cache(c10::DeviceType device) {
  thread_local std::array<DeviceCache, kDeviceTypes> caches;
  return caches.at(static_cast<std::size_t>(device));
}

}  // namespace

const Quantized* find_cached_weight(const WeightCacheKey& key, const at::Tensor& weight) {
  return thread_cache(weight.device().type()).find(key, weight);
}

void cache_weight(const WeightCacheKey& key, const at::Tensor& weight, const Quantized& q) {
  thread_cache(weight.device().type()).insert(key, weight, q);
}

void count_weight_quantization(c10::DeviceType device) { thread_cache(device).count_quantization(); }

}  // namespace detail

CacheStats weight_cache_stats(c10::DeviceType device) { return detail::thread_cache(device).stats(); }

void clear_weight_cache(c10::DeviceType device) { detail::thread_cache(device).clear(); }

void reset_weight_cache_stats(c10::DeviceType device) { detail::thread_cache(device).reset_stats(); }

}  // namespace autocastgen::fp8
