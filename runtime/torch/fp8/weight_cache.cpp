// Note [fp8 weight cache]
// A weight used many times in one autocast scope (a shared embedding, a layer applied in a loop,
// gradient accumulation's micro-batches in one scope) is quantised once: its fp8 copy and inverse
// scale are kept until the scope ends. Like the cast cache (Note [cast cache] in cast_cache.cpp)
// it is per thread and per device type, so a hit takes no lock, and entries hold a weak reference
// to the weight, so its TensorImpl (not its storage) outlives the entry and its address cannot be
// reused by another tensor while the entry exists.
//
// Unlike a cast, the fp8 copy has no autograd history (gradients flow to the weight through the
// fp8 GEMM's own backward), so nothing in an entry keeps the weight alive: "dead" is simply
// "the weak reference expired". Dead entries are swept whenever the map has doubled since the
// last sweep.
//
// An entry is served only while the weight shows the marks of the data it was made from (Note
// [data stamps] in data_stamp.h); a changed weight is re-quantised and its entry replaced. And the
// cache ends with the scope: the own state's outermost scope clears it (Note [caches of a scope]
// in state_internal.h: registered with the state at load), and so does the end of PyTorch's
// outermost torch.autocast (Note [PyTorch's scope end]), which no stamp can replace: FSDP2 refills
// a parameter's memory in place between steps without a mark.
//
// Note [PyTorch's scope end]
// torch.autocast clears PyTorch's cast cache when its outermost scope exits and tells nobody else.
// So the cache plants a sentinel there: a one-element float32 leaf of ours, cast through
// at::autocast::cached_cast, which PyTorch keeps (its map holds the only strong reference to the
// cast) until it clears. The cache holds a weak reference to that cast; when it has expired,
// PyTorch's cache was cleared since (a scope ended, on this thread or another: PyTorch's map is one
// for the process), and the fp8 copies are dropped before the next lookup. Checking costs one
// atomic load. Where PyTorch does not cache (its cache disabled, the sentinel's device without an
// autocast dtype cast), the cast dies at once and nothing is kept: no entry outlives a lookup.
#include "weight_cache.h"

#include <algorithm>
#include <array>
#include <functional>

#include <ATen/autocast_mode.h>
#include <ATen/ops/ones.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/flat_hash_map.h>

#include "autocastgen/fp8/fp8.h"
#include "state/state_internal.h"
#include "../data_stamp.h"
#include "../device_types.h"

namespace autocastgen::fp8 {
namespace detail {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

struct KeyHash {
  std::size_t operator()(const WeightCacheKey& k) const {
    std::size_t h = std::hash<const void*>()(k.weight);
    h ^= (static_cast<std::size_t>(k.fp8) << 1) ^ (static_cast<std::size_t>(k.scaling) << 9) ^
         (static_cast<std::size_t>(k.margin) << 11) ^ (static_cast<std::size_t>(k.inference) << 19) ^
         (static_cast<std::size_t>(k.reduced_dim + 1) << 21);
    return h;
  }
};

struct Entry {
  WeakImpl weight;
  DataStamp stamp;
  Quantized q;
};

// Note [PyTorch's scope end]: whether PyTorch's cast cache was cleared since the sentinel was planted.
class TorchScopeWatch {
 public:
  [[nodiscard]] bool cleared() const { return planted_.expired(); }

  // Plants the sentinel on `like`'s device.
  void plant(const at::Tensor& like) {
    const c10::DeviceType device = like.device().type();
    if (!sentinel_.defined() || sentinel_.device() != like.device()) {
      // A plain tensor even when called under inference mode, so that PyTorch may cache its cast.
      const c10::InferenceMode plain(false);
      sentinel_ = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(like.device())).requires_grad_(true);
    }
    const c10::AutoGradMode grad_on(true);  // the cast PyTorch keeps records history, as its own do
    const at::Tensor cast = at::autocast::cached_cast(at::autocast::get_autocast_dtype(device), sentinel_, device);
    planted_ = WeakImpl(cast.getIntrusivePtr());
  }

 private:
  at::Tensor sentinel_;
  WeakImpl planted_{c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
};

class DeviceCache {
 public:
  const Quantized* find(const WeightCacheKey& key, const at::Tensor& weight) {
    if (torch_scope_.cleared()) {
      clear();
      torch_scope_.plant(weight);
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    if (it->second.weight.expired() || !it->second.stamp.matches(weight)) {
      entries_.erase(it);
      return nullptr;
    }
    ++stats_.hits;
    return &it->second.q;
  }

  void insert(const WeightCacheKey& key, const at::Tensor& weight, const Quantized& q) {
    if (entries_.size() >= sweep_at_) sweep();
    entries_.insert_or_assign(key, Entry{WeakImpl(weight.getIntrusivePtr()), DataStamp(weight), q});
  }

  void clear() {
    entries_.clear();
    sweep_at_ = kMinSweep;
  }

  CacheStats stats() {
    if (torch_scope_.cleared()) clear();
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
  TorchScopeWatch torch_scope_;
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

namespace {
// Note [caches of a scope]: the state clears this cache when a device's outermost scope ends.
const bool g_weight_cache_ends_with_scope = (::autocastgen::detail::on_scope_end(&clear_weight_cache), true);
}  // namespace

void reset_weight_cache_stats(c10::DeviceType device) { detail::thread_cache(device).reset_stats(); }

}  // namespace autocastgen::fp8
