// Note [delayed scaling state]
// Delayed scaling needs state that outlives autocast scopes: each weight's amax history and the
// scale of its next cast. It is kept here, per (weight, fp8 dtype), for the whole process, and
// shared by threads (two threads training one model share one history). A global mutex guards the
// map; each state has its own mutex, held while that weight is cast, so concurrent casts of one
// weight record their amaxes one after the other. The lock is only taken when a weight is
// actually quantised (once per scope with the weight cache), never on a cache hit.
//
// The history advances once per quantisation of the weight: once per autocast scope, that is per
// training step, with the weight cache; at every call without it. Entries hold a weak reference
// to the weight, and those whose weight died are swept whenever the map has doubled.
#include "delayed_state.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include <ATen/ATen.h>
#include <c10/util/flat_hash_map.h>

#include "autocastgen/fp8/fp8.h"

namespace autocastgen::fp8 {
namespace detail {
namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

struct StateKey {
  const c10::TensorImpl* weight;
  c10::ScalarType fp8;
  bool operator==(const StateKey&) const = default;
};

struct StateKeyHash {
  std::size_t operator()(const StateKey& k) const {
    return std::hash<const void*>()(k.weight) ^ (static_cast<std::size_t>(k.fp8) << 1);
  }
};

struct StateEntry {
  explicit StateEntry(WeakImpl w) : weight(std::move(w)) {}
  WeakImpl weight;
  std::mutex mutex;
  DelayedState state;
};

class Registry {
 public:
  std::shared_ptr<StateEntry> get(const StateKey& key, const at::Tensor& weight, bool create) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end() && !it->second->weight.expired()) return it->second;
    if (it != entries_.end()) entries_.erase(it);
    if (!create) return nullptr;
    if (entries_.size() >= sweep_at_) sweep();
    auto entry = std::make_shared<StateEntry>(WeakImpl(weight.getIntrusivePtr()));
    entries_.emplace(key, entry);
    return entry;
  }

  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    sweep_at_ = kMinSweep;
  }

  std::size_t size() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  static constexpr std::size_t kMinSweep = 64;

  void sweep() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second->weight.expired() ? entries_.erase(it) : std::next(it);
    }
    sweep_at_ = std::max(kMinSweep, 2 * entries_.size());
  }

  std::mutex mutex_;
  ska::flat_hash_map<StateKey, std::shared_ptr<StateEntry>, StateKeyHash> entries_;
  std::size_t sweep_at_ = kMinSweep;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: casts may run during static destruction
  return *r;
}

void start(DelayedState& s, const at::Tensor& weight, std::int32_t history_len, std::int32_t margin) {
  const auto options = weight.options().dtype(at::kFloat);
  s.amax_ring = at::zeros({history_len}, options);
  s.scale = at::ones({}, options);
  s.length = history_len;
  s.margin = margin;
  s.next = 0;
  s.casts = 0;
}

}  // namespace

Quantized with_delayed_state(const at::Tensor& weight, c10::ScalarType fp8, std::int32_t history_len,
                             std::int32_t margin, const std::function<Quantized(DelayedState&)>& cast) {
  const std::shared_ptr<StateEntry> entry = registry().get({weight.unsafeGetTensorImpl(), fp8}, weight, true);
  const std::lock_guard<std::mutex> lock(entry->mutex);
  DelayedState& s = entry->state;
  if (!s.amax_ring.defined() || s.length != history_len || s.margin != margin) {
    start(s, weight, history_len, margin);
  } else if (s.amax_ring.device() != weight.device()) {
    s.amax_ring = s.amax_ring.to(weight.device());
    s.scale = s.scale.to(weight.device());
  }
  return cast(s);
}

}  // namespace detail

std::optional<DelayedScalingSnapshot> delayed_scaling_state(const at::Tensor& weight, c10::ScalarType forward_dtype) {
  const auto entry = detail::registry().get({weight.unsafeGetTensorImpl(), forward_dtype}, weight, false);
  if (!entry) return std::nullopt;
  const std::lock_guard<std::mutex> lock(entry->mutex);
  const detail::DelayedState& s = entry->state;
  if (!s.amax_ring.defined()) return std::nullopt;
  DelayedScalingSnapshot snap;
  const at::Tensor ring = s.amax_ring.to(at::kCPU);
  const float* a = ring.const_data_ptr<float>();
  const auto recorded = static_cast<std::int32_t>(std::min<std::int64_t>(s.casts, s.length));
  for (std::int32_t i = 1; i <= recorded; ++i) snap.amax_history.push_back(a[(s.next - i + s.length) % s.length]);
  snap.scale = s.scale.to(at::kCPU).item<float>();
  snap.casts = s.casts;
  return snap;
}

void reset_delayed_scaling_state() { detail::registry().clear(); }

std::size_t delayed_scaling_state_size() { return detail::registry().size(); }

}  // namespace autocastgen::fp8
