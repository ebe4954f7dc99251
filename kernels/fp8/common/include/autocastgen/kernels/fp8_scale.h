// The fp8 scale rule and delayed scaling's amax history, host+device (one thread's arithmetic).
#pragma once

#include <cstdint>

#include "autocastgen/kernels/hd.h"
#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen::kernels::fp8 {

// The largest scale the rule returns: 2^126, so that 1/scale (what the GEMM multiplies by) is a
// normal float that no flush-to-zero mode can turn into 0.
inline constexpr float kMaxScale = 8.507059173023462e37f;  // 2^126

// Note [fp8 scale]
// scale = fp8_max / amax / 2^margin, so that amax * scale lands on the format's largest finite
// value (margin > 0 leaves 2^margin of head room). x is stored as fp8(x * scale) and the GEMM
// multiplies its result by 1/scale.
//  - amax finite and > 0: the quotient is computed in double and rounded once to float (what
//    torchao's amax_to_scale does for margin 0, so scales agree bit for bit when
//    amax >= torchao's EPS of 1e-12), then capped at kMaxScale (amax below about 5e-36).
//  - amax == 0 (an all-zero tensor, or an empty history): `fallback`. Any scale quantises zeros
//    exactly; current scaling passes 1, delayed scaling the previous scale.
//  - amax NaN or +inf (the tensor holds a NaN or an infinity): NaN. The quantised tensor becomes
//    all NaN and so does the GEMM's result: a non-finite operand gives a non-finite result, as it
//    would in bfloat16, instead of being silently clamped to fp8's range, and a GradScaler's
//    check sees it and skips the step.
AUTOCASTGEN_HD float scale_from_amax(float amax, float fp8_max, std::int32_t margin, float fallback) {
  if (!is_finite_float(amax)) return float_of(0x7fc00000u);
  if (amax <= 0.0f) return fallback;  // amax is a magnitude; <= 0 means == 0
  double s = static_cast<double>(fp8_max) / static_cast<double>(amax);
  // 2^-margin, exact for the margins a recipe accepts (0..64).
  for (std::int32_t i = 0; i < margin; ++i) s *= 0.5;
  return s >= static_cast<double>(kMaxScale) ? kMaxScale : static_cast<float>(s);
}

// What the GEMM multiplies by: 1/scale, rounded to float (as torchao passes scale.reciprocal()).
AUTOCASTGEN_HD float inverse_scale(float scale) { return 1.0f / scale; }

// Note [fp8 power-of-two scale]
// Row-wise scales (Note [fp8 rowwise] in runtime/torch/fp8/rowwise.cpp) are powers of two, so that
// dequantising (x8 * 1/scale) is exact: the scale rule above (fallback 1), then rounded down to a
// power of two by keeping the float's exponent bits, i.e. 2^floor(log2(scale)):
//  - a normal scale keeps its exponent (exact: no rounding happens);
//  - a scale that underflowed to a float32 subnormal or zero (margin near 64 with a tiny fp8_max /
//    amax) becomes +0, and its inverse +inf; no recipe meets this, but every path agrees on it;
//  - NaN (a non-finite amax) stays the canonical NaN scale_from_amax returns.
// The rounding to float32 cannot carry a scale up to the next power of two: amax is a float32 and
// fp8_max has a short mantissa, so fp8_max / amax is never within 2^-24 (relative) below one.
// The PyTorch-ops form of this rule (runtime/torch/fp8/quantize.cpp, aten_power_of_two_scale) is
// built from the same two steps, the ops form of scale_from_amax and the same bit mask, and the
// tests compare the fused row-wise kernels with it bit for bit.
AUTOCASTGEN_HD float round_down_to_power_of_two(float scale) {
  return is_finite_float(scale) ? float_of(bits_of(scale) & 0x7f800000u) : scale;
}

AUTOCASTGEN_HD float power_of_two_scale(float amax, float fp8_max, std::int32_t margin) {
  return round_down_to_power_of_two(scale_from_amax(amax, fp8_max, margin, 1.0f));
}

// Note [delayed scaling]
// Delayed scaling (Transformer Engine's recipe) casts a tensor with a scale derived from the
// amaxes of its previous casts and records this cast's amax in the same pass. The history is a
// ring of `length` floats; `next` is where the next amax goes (it overwrites the oldest one once
// the ring is full) and `count` how many have been recorded (capped at length). The scale for the
// next cast comes from the largest *finite* amax in the window (a non-finite amax is recorded, so
// the history shows it, but never becomes a scale; the cast that met it already returned NaN
// through dequant_scale_for_pass below), with the previous scale as the fallback when that is 0
// (or 1 when the previous scale is NaN: the first cast of a tensor holding a NaN).
struct DelayedHistory {
  float* amax = nullptr;  // `length` floats
  std::int32_t length = 0;
  std::int32_t next = 0;
  std::int32_t count = 0;
};

AUTOCASTGEN_HD float history_max_finite(const float* amax, std::int32_t count) {
  float best = 0.0f;
  for (std::int32_t i = 0; i < count; ++i) {
    const float a = amax[i];
    if (is_finite_float(a) && a > best) best = a;
  }
  return best;
}

// Records `amax` (advancing next/count as the caller does on the host) and returns the scale for
// the next cast. `count` is the number recorded before this one.
AUTOCASTGEN_HD float delayed_record_and_rescale(float* amax_ring, std::int32_t length, std::int32_t next,
                                                std::int32_t count, float amax, float previous_scale,
                                                float fp8_max, std::int32_t margin) {
  amax_ring[next] = amax;
  const std::int32_t filled = count < length ? count + 1 : length;
  // A first cast that met a NaN was made with a NaN scale; never carry that forward.
  const float fallback = is_finite_float(previous_scale) ? previous_scale : 1.0f;
  return scale_from_amax(history_max_finite(amax_ring, filled), fp8_max, margin, fallback);
}

// The dequantisation factor for a cast made with `scale` whose pass measured `amax`: 1/scale, or
// NaN when the pass met a NaN or an infinity (Note [fp8 scale]: a non-finite operand gives a
// non-finite result under delayed scaling too, where the cast itself saturated it).
AUTOCASTGEN_HD float dequant_scale_for_pass(float scale, float amax) {
  return is_finite_float(amax) ? inverse_scale(scale) : float_of(0x7fc00000u);
}

}  // namespace autocastgen::kernels::fp8
