// Element logic of fp8 quantisation (amax, scale, saturating cast), written once for CPU and CUDA.
#pragma once

#include <cstdint>

#include "autocastgen/kernels/hd.h"
#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen::kernels::fp8 {

// The two fp8 formats of mixed-precision training (OCP FP8): e4m3fn (no infinities, one NaN code
// per sign, largest finite 448) for weights and activations, e5m2 (IEEE-like, largest finite
// 57344) for gradients.
enum class Fp8Format : std::uint8_t { E4M3FN, E5M2 };

template <Fp8Format F>
struct Fp8Traits;

template <>
struct Fp8Traits<Fp8Format::E4M3FN> {
  static constexpr std::uint32_t kMantissaBits = 3;
  static constexpr std::uint32_t kBias = 7;
  static constexpr std::uint32_t kMaxCode = 0x7e;        // 0.1111.110 = 448
  static constexpr std::uint32_t kMaxBits = 0x43e00000;  // 448.0f
  static constexpr float kMax = 448.0f;
};

template <>
struct Fp8Traits<Fp8Format::E5M2> {
  static constexpr std::uint32_t kMantissaBits = 2;
  static constexpr std::uint32_t kBias = 15;
  static constexpr std::uint32_t kMaxCode = 0x7b;        // 0.11110.11 = 57344
  static constexpr std::uint32_t kMaxBits = 0x47600000;  // 57344.0f
  static constexpr float kMax = 57344.0f;
};

AUTOCASTGEN_HD float fp8_max(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? Fp8Traits<Fp8Format::E4M3FN>::kMax : Fp8Traits<Fp8Format::E5M2>::kMax;
}

constexpr const char* fp8_format_name(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? "float8_e4m3fn" : "float8_e5m2";
}

// --- Words: the operations the element logic needs, one element or eight at a time -----------
// Note [fp8 words]
// The conversion below is written once against a "words" type W that supplies 32-bit integer and
// float operations: ScalarWords (one element; the CUDA kernel and the CPU baseline path) and
// Avx2Words in kernels/fp8/cpu/fp8_cpu_avx2.cpp (eight elements). Comparisons are signed, which
// is safe because they only ever see magnitudes (bit 31 cleared). Masks are all-ones or zero.
struct ScalarWords {
  using U = std::uint32_t;
  using F = float;
  static AUTOCASTGEN_HD U set(std::uint32_t v) { return v; }
  static AUTOCASTGEN_HD U bits(F x) { return bits_of(x); }
  static AUTOCASTGEN_HD F floats(U u) { return float_of(u); }
  static AUTOCASTGEN_HD U and_(U a, U b) { return a & b; }
  static AUTOCASTGEN_HD U or_(U a, U b) { return a | b; }
  static AUTOCASTGEN_HD U add(U a, U b) { return a + b; }
  static AUTOCASTGEN_HD U sub(U a, U b) { return a - b; }
  template <int S>
  static AUTOCASTGEN_HD U srl(U a) { return a >> S; }
  static AUTOCASTGEN_HD U gt(U a, U b) {
    return static_cast<std::int32_t>(a) > static_cast<std::int32_t>(b) ? 0xffffffffu : 0u;
  }
  static AUTOCASTGEN_HD U select(U mask, U if_set, U if_clear) { return (if_set & mask) | (if_clear & ~mask); }
  static AUTOCASTGEN_HD U max(U a, U b) { return a > b ? a : b; }
  // Rounded to nearest even and never fused with a neighbouring operation into an FMA (the host
  // build has -ffp-contract=off through -std=c++20; on the device the _rn intrinsics forbid it).
  static AUTOCASTGEN_HD F fadd(F a, F b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
  }
  static AUTOCASTGEN_HD F fmul(F a, F b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
  }
};

// --- The cast -------------------------------------------------------------------------------------
// Note [fp8 cast]
// fp8_code() maps float bits to the fp8 code (in the low 8 bits of the word) exactly as PyTorch's
// `x.clamp(-max, max).to(float8)` does (PyTorch 2.12+ CPU casts; tests/fp8 checks every class of
// input against the installed PyTorch):
//  - |x| >= max, infinities included, saturates to +-max (the clamp);
//  - NaN becomes the format's NaN code 0x7f with the sign bit of the input (S.1111.111 for
//    e4m3fn, S.11111.11 for e5m2). PyTorch keeps that sign for float32 sources but its own
//    bfloat16/float16 -> float32 widening drops a NaN's sign on some paths, so only NaN-ness is
//    part of the contract there (as in Note [conversions] of scaler_element.h);
//  - everything else rounds to nearest, ties to even; below the smallest normal the result is a
//    subnormal or a signed zero, so -0.0 stays -0.0.
// Normal results round the float's mantissa with integer arithmetic (add half an ulp minus one,
// plus the lsb for ties-to-even; a carry into the exponent is the correct result). Subnormal
// results use the float adder: adding C = 2^(24 - bias - mantissa_bits), whose ulp is the fp8's
// smallest subnormal, rounds |x| to a multiple of that subnormal in the hardware's
// round-to-nearest-even, and the bits above C's are the code. Both halves are computed for every
// element and one is selected, so the code has no branches and vectorises.
template <Fp8Format Fmt, class W>
AUTOCASTGEN_HD typename W::U fp8_code(typename W::U u) {
  using T = Fp8Traits<Fmt>;
  using U = typename W::U;
  constexpr std::uint32_t kShift = 23 - T::kMantissaBits;
  constexpr std::uint32_t kRebias = (127 - T::kBias) << 23;
  constexpr std::uint32_t kMinNormalBits = (127 - T::kBias + 1) << 23;
  constexpr std::uint32_t kMagicBits = (127 + 24 - T::kBias - T::kMantissaBits) << 23;

  const U sign = W::and_(W::template srl<24>(u), W::set(0x80u));
  const U a = W::and_(u, W::set(0x7fffffffu));

  U r = W::sub(a, W::set(kRebias));
  r = W::add(r, W::add(W::set((1u << (kShift - 1)) - 1u), W::and_(W::template srl<kShift>(r), W::set(1u))));
  const U normal = W::template srl<kShift>(r);

  const U magic = W::set(kMagicBits);
  const U subnormal = W::sub(W::bits(W::fadd(W::floats(a), W::floats(magic))), magic);

  U code = W::select(W::gt(W::set(kMinNormalBits), a), subnormal, normal);
  code = W::select(W::gt(a, W::set(T::kMaxBits - 1u)), W::set(T::kMaxCode), code);  // a >= max: saturate
  code = W::select(W::gt(a, W::set(0x7f800000u)), W::set(0x7fu), code);              // NaN
  return W::or_(code, sign);
}

// Note [amax]
// The amax of a tensor is max |x| and propagates NaN: one NaN element makes it NaN, like
// `x.abs().max()` in PyTorch (and torchao's tensor_to_amax). A NaN must not vanish into a finite
// scale (Note [fp8 scale] then turns it into a NaN GEMM result, which a GradScaler sees).
// Computed on the bits: with the sign cleared, float magnitudes order like unsigned integers and
// every NaN is above +inf, so the integer max of the magnitude bits is exact and NaN-propagating,
// needs no comparison with NaN semantics, and is the same on every path. The result is the bits
// of one input element's magnitude (the NaN keeps its payload).
template <class W>
AUTOCASTGEN_HD typename W::U magnitude_bits(typename W::F x) {
  return W::and_(W::bits(x), W::set(0x7fffffffu));
}

// The fused element: x * scale in float, saturated and cast (Note [fp8 cast]); with kAmax, the
// magnitude of x (before scaling) joins the running amax (Note [amax]).
template <Fp8Format Fmt, bool kAmax, class W>
AUTOCASTGEN_HD typename W::U quantize_element(typename W::F x, typename W::F scale, typename W::U& amax) {
  if constexpr (kAmax) amax = W::max(amax, magnitude_bits<W>(x));
  return fp8_code<Fmt, W>(W::bits(W::fmul(x, scale)));
}

// Note [fp8 NaN scale]
// A row-wise slice holding a NaN or an infinity has the scale NaN (Note [fp8 power-of-two scale]),
// and every product x * NaN is NaN. Which NaN is not fixed by IEEE when x is a NaN too: x86's
// multiply returns its first operand's, so the sign could depend on the compiler's operand order.
// PyTorch's ops give the scale's NaN (positive) on the CPU, and a GPU gives its canonical positive
// NaN, so such a slice is cast to the positive NaN code 0x7f throughout (both formats' NaN), and
// the kernels write that code instead of relying on the multiply.
inline constexpr std::uint8_t kNanScaleCode = 0x7f;

// The element of a slice cast with `scale`: the fused element, or kNanScaleCode for a NaN scale.
template <Fp8Format Fmt>
AUTOCASTGEN_HD std::uint8_t quantize_slice_element(float x, float scale) {
  std::uint32_t unused = 0;
  return is_finite_float(scale) ? static_cast<std::uint8_t>(quantize_element<Fmt, false, ScalarWords>(x, scale, unused))
                                : kNanScaleCode;
}

// One element, host or device: the fp8 code of the saturating cast of x.
AUTOCASTGEN_HD std::uint8_t float_to_fp8(float x, Fp8Format f) {
  return static_cast<std::uint8_t>(f == Fp8Format::E4M3FN
                                       ? fp8_code<Fp8Format::E4M3FN, ScalarWords>(bits_of(x))
                                       : fp8_code<Fp8Format::E5M2, ScalarWords>(bits_of(x)));
}

// Widening the element types the quantiser reads (exact; scaler_element.h's conversions, the
// hardware converter for float16 on the device).
template <DType D>
AUTOCASTGEN_HD float widen_element(const void* p, std::int64_t i) {
  if constexpr (D == DType::Float32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (D == DType::BFloat16) {
    return bf16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
  } else {
    static_assert(D == DType::Float16, "fp8 quantisation reads float32, bfloat16 or float16");
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(static_cast<const std::uint16_t*>(p)[i]));
#else
    return half_bits_to_float(static_cast<const std::uint16_t*>(p)[i]);
#endif
  }
}

}  // namespace autocastgen::kernels::fp8
