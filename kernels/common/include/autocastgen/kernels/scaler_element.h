// Element logic of "unscale + non-finite check", written once for the CPU and the CUDA kernels.
#pragma once

#include <cstdint>

#include "autocastgen/kernels/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace autocastgen::kernels {

// Gradient element types the kernels accept. Float64 is there so that a GradScaler over double
// parameters works like PyTorch's; mixed precision training uses the other three.
enum class DType : std::uint8_t { Float32, Float16, BFloat16, Float64 };

// --- IEEE conversions, software versions -------------------------------------------------------
// Note [conversions]
// Widening fp16/bf16 to fp32 is exact. Narrowing rounds to nearest, ties to even, overflows to
// infinity, and keeps subnormals, exactly like F16C's vcvtps2ph and CUDA's __float2half_rn, so
// every non-NaN result is the same bits on every path. A NaN stays a NaN with its sign, its quiet
// bit set and its payload truncated (what vcvtps2ph does); NaN payloads are not part of the
// contract (PyTorch's own CPU kernel gives different NaN bits on its scalar and vector paths).

AUTOCASTGEN_HD float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) {
    // Infinity keeps a zero mantissa; a NaN becomes a quiet NaN, as the hardware converters do.
    return float_of(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    // Subnormal mant * 2^-24: normalise with integer shifts, so a flush-to-zero FPU mode cannot
    // change the result.
    std::uint32_t e = 113u;  // float exponent of 2^-14, the smallest normal half
    std::uint32_t m = mant;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return float_of(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

AUTOCASTGEN_HD std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // infinity or NaN
    if (a == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  // 65520 is halfway between 65504 (the largest half) and 65536; the tie goes to the even
  // neighbour, 65536, which does not exist and becomes infinity.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // the result is a normal half (>= 2^-14)
    std::uint32_t r = a - (112u << 23);  // rebias the exponent from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);      // round the 23-bit mantissa to 10 bits, ties to even
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  // The result is a subnormal half m * 2^-24 (or zero); 2^-25 itself is a tie that goes to 0.
  if (a <= 0x33000000u) return static_cast<std::uint16_t>(sign);
  const std::uint32_t e = a >> 23;  // 102..112 here
  const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t m = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t half_way = 1u << (shift - 1u);
  if (rest > half_way || (rest == half_way && (m & 1u) != 0)) ++m;  // may carry into 2^-14: fine
  return static_cast<std::uint16_t>(sign | m);
}

AUTOCASTGEN_HD float bf16_bits_to_float(std::uint16_t b) {
  return float_of(static_cast<std::uint32_t>(b) << 16);
}

AUTOCASTGEN_HD std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, set the quiet bit
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  }
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

AUTOCASTGEN_HD bool is_finite_float(float x) { return (bits_of(x) & 0x7f800000u) != 0x7f800000u; }

// --- Lanes ---------------------------------------------------------------------------------------
// Note [lanes]
// A lane describes how one "value" of a gradient is stored, widened to its compute type,
// multiplied, narrowed back and tested for inf/NaN. ScalarLane<D> is one element and is what the
// CUDA kernel and the CPU baseline path use; the CPU AVX2 path instantiates the same
// unscale_value() below with 8-wide lanes (kernels/cpu/simd_lanes_avx2.h). The non-finite test
// looks at the stored bits (exponent all ones), which is the same as testing the widened value.

template <DType D>
struct ScalarLane;

template <>
struct ScalarLane<DType::Float32> {
  using Stored = float;
  using Wide = float;
  using Flag = std::uint32_t;
  static AUTOCASTGEN_HD Wide broadcast(float inv) { return inv; }
  static AUTOCASTGEN_HD Flag nonfinite(Stored s) { return (bits_of(s) & 0x7f800000u) == 0x7f800000u; }
  static AUTOCASTGEN_HD Wide widen(Stored s) { return s; }
  static AUTOCASTGEN_HD Stored narrow(Wide w) { return w; }
  static AUTOCASTGEN_HD Wide mul(Wide a, Wide b) { return a * b; }
  static AUTOCASTGEN_HD Flag merge(Flag a, Flag b) { return a | b; }
};

template <>
struct ScalarLane<DType::Float64> {
  using Stored = double;
  using Wide = double;  // PyTorch computes double gradients in double, with the float inv_scale
  using Flag = std::uint32_t;
  static AUTOCASTGEN_HD Wide broadcast(float inv) { return static_cast<double>(inv); }
  static AUTOCASTGEN_HD Flag nonfinite(Stored s) {
    return (bits_of(s) & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  }
  static AUTOCASTGEN_HD Wide widen(Stored s) { return s; }
  static AUTOCASTGEN_HD Stored narrow(Wide w) { return w; }
  static AUTOCASTGEN_HD Wide mul(Wide a, Wide b) { return a * b; }
  static AUTOCASTGEN_HD Flag merge(Flag a, Flag b) { return a | b; }
};

template <>
struct ScalarLane<DType::Float16> {
  using Stored = std::uint16_t;  // raw IEEE binary16 bits
  using Wide = float;
  using Flag = std::uint32_t;
  static AUTOCASTGEN_HD Wide broadcast(float inv) { return inv; }
  static AUTOCASTGEN_HD Flag nonfinite(Stored s) { return (s & 0x7c00u) == 0x7c00u; }
  static AUTOCASTGEN_HD Wide widen(Stored s) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(s));  // hardware cvt: same values, see [conversions]
#else
    return half_bits_to_float(s);
#endif
  }
  static AUTOCASTGEN_HD Stored narrow(Wide w) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(w));
#else
    return float_to_half_bits(w);
#endif
  }
  static AUTOCASTGEN_HD Wide mul(Wide a, Wide b) { return a * b; }
  static AUTOCASTGEN_HD Flag merge(Flag a, Flag b) { return a | b; }
};

template <>
struct ScalarLane<DType::BFloat16> {
  using Stored = std::uint16_t;  // raw bfloat16 bits
  using Wide = float;
  using Flag = std::uint32_t;
  static AUTOCASTGEN_HD Wide broadcast(float inv) { return inv; }
  static AUTOCASTGEN_HD Flag nonfinite(Stored s) { return (s & 0x7f80u) == 0x7f80u; }
  // bf16 uses the software conversions on the GPU too: they are a shift and an add, cheap next
  // to the memory traffic, and identical to what the CPU tests check.
  static AUTOCASTGEN_HD Wide widen(Stored s) { return bf16_bits_to_float(s); }
  static AUTOCASTGEN_HD Stored narrow(Wide w) { return float_to_bf16_bits(w); }
  static AUTOCASTGEN_HD Wide mul(Wide a, Wide b) { return a * b; }
  static AUTOCASTGEN_HD Flag merge(Flag a, Flag b) { return a | b; }
};

// --- The element logic ---------------------------------------------------------------------------
// Note [unscale semantics]
// found_inf is about the *input*: an element that is inf or NaN before unscaling sets it; a finite
// element whose product overflows does not (PyTorch's rule). The output is widen(x) * inv_scale
// rounded back to the storage type. When inv_scale is exactly 1 the output equals the input, so
// kernels only check and do not write (unscale_writes() is false).

AUTOCASTGEN_HD bool unscale_writes(float inv_scale) { return !(inv_scale == 1.0f); }

template <class Lane>
AUTOCASTGEN_HD typename Lane::Stored unscale_value(typename Lane::Stored in,
                                                   typename Lane::Wide inv,
                                                   typename Lane::Flag& nonfinite) {
  nonfinite = Lane::merge(nonfinite, Lane::nonfinite(in));
  return Lane::narrow(Lane::mul(Lane::widen(in), inv));
}

template <class Lane>
AUTOCASTGEN_HD void check_value(typename Lane::Stored in, typename Lane::Flag& nonfinite) {
  nonfinite = Lane::merge(nonfinite, Lane::nonfinite(in));
}

}  // namespace autocastgen::kernels
