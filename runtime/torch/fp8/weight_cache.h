// fp8 copies of weights, cached per thread (internal; Note [fp8 weight cache] in weight_cache.cpp).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "autocastgen/fp8/recipe.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {

// What makes two quantisations of one weight interchangeable.
struct WeightCacheKey {
  const c10::TensorImpl* weight = nullptr;
  c10::ScalarType fp8 = c10::ScalarType::Undefined;
  Scaling scaling = Scaling::Current;
  std::int32_t margin = 0;
  bool inference = false;  // made in inference mode (an inference tensor may not be saved for backward)
  // -1: one scale for the tensor; 0 or 1: row-wise scales, one per slice along the other
  // dimension, with amaxes taken over this one (Note [fp8 rowwise]), so that a tensorwise copy and
  // the two row-wise copies of one weight never stand in for each other.
  std::int8_t reduced_dim = -1;
  bool operator==(const WeightCacheKey&) const = default;
};

// This thread's copy of `weight` for `key`, or nullptr when there is none or the weight changed
// since (its version counter or data pointer). A found copy counts as a hit.
[[nodiscard]] const Quantized* find_cached_weight(const WeightCacheKey& key, const at::Tensor& weight);
// Keeps `q` as this thread's copy of `weight` (replacing a stale one).
void cache_weight(const WeightCacheKey& key, const at::Tensor& weight, const Quantized& q);
// Counts one quantisation of a weight (cached or not) in this thread's statistics.
void count_weight_quantization(c10::DeviceType device);

}  // namespace autocastgen::fp8::detail
