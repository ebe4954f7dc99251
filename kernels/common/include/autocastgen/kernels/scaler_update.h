// The loss-scale update rule (growth tracker, backoff, optional hysteresis and clamps), host+device.
#pragma once

#include <cstdint>

#include "autocastgen/kernels/hd.h"
#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen::kernels {

// Factors are doubles because PyTorch's op takes them as `float` schema arguments (C++ double)
// and multiplies the float scale by them in double before rounding to float; doing the same keeps
// the trajectory bit-identical for factors that are not exact floats (0.7, 1.1, ...).
struct ScaleUpdateConfig {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  // Extras, off by default (these defaults give exactly PyTorch's rule): see Note [hysteresis].
  std::int32_t hysteresis = 1;
  float min_scale = 0.0f;
  float max_scale = __builtin_huge_valf();
};

// Note [update rule]
// PyTorch's rule: the growth tracker counts consecutive clean steps. On a step with found_inf
// (any non-zero value, NaN included) the scale is multiplied by backoff_factor and the tracker is
// reset. Otherwise the tracker is incremented; when it reaches growth_interval the scale is
// multiplied by growth_factor, unless that would make it non-finite, and the tracker is reset.
//
// Note [hysteresis]
// Megatron-LM's variant: `hysteresis_left` starts at `hysteresis` (N). Each step with found_inf
// resets the growth tracker and decrements hysteresis_left (not below 0); the scale backs off only
// once hysteresis_left has reached 0, so N-1 overflows are tolerated and the N-th backs off. The
// budget is refilled to N only when growth_interval clean steps complete (the point where the
// scale would grow), not after every clean step as DeepSpeed's `consecutive_hysteresis` does:
// with a refill per clean step, overflows that come every few steps would never lower the scale
// while every one of those steps is skipped. With N = 1 the rule is exactly PyTorch's.
// min_scale / max_scale clamp the result of a backoff / growth (a NaN scale stays NaN).
// With hysteresis_left == nullptr the hysteresis setting is ignored (N = 1).
AUTOCASTGEN_HD void update_scale_step(float* scale, std::int32_t* growth_tracker,
                                      std::int32_t* hysteresis_left, float found_inf,
                                      const ScaleUpdateConfig& cfg) {
  if (found_inf != 0.0f) {
    *growth_tracker = 0;
    bool back_off = true;
    if (hysteresis_left != nullptr) {
      if (*hysteresis_left > 0) *hysteresis_left -= 1;
      back_off = *hysteresis_left <= 0;
    }
    if (back_off) {
      float backed_off = static_cast<float>(static_cast<double>(*scale) * cfg.backoff_factor);
      if (backed_off < cfg.min_scale) backed_off = cfg.min_scale;
      *scale = backed_off;
    }
    return;
  }
  const std::int64_t successful = static_cast<std::int64_t>(*growth_tracker) + 1;
  if (successful == cfg.growth_interval) {
    float grown = static_cast<float>(static_cast<double>(*scale) * cfg.growth_factor);
    if (grown > cfg.max_scale) grown = cfg.max_scale;
    if (is_finite_float(grown)) *scale = grown;
    *growth_tracker = 0;
    if (hysteresis_left != nullptr) *hysteresis_left = cfg.hysteresis;
  } else {
    // Only a growth_interval the tracker can never reach (<= 0) gets here with a huge count; the
    // conversion wraps instead of overflowing (well defined since C++20).
    *growth_tracker = static_cast<std::int32_t>(successful);
  }
}

}  // namespace autocastgen::kernels
