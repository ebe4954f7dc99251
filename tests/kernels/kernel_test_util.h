// Shared helpers for the kernel tests: independent reference conversions, bit access, random data.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "autocastgen/kernels/grad_span.h"

namespace autocastgen::kernels::testing {

inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The compiler's own binary16 (GCC's _Float16, correctly rounded conversions in libgcc or
// hardware) is the reference for our software fp16 conversions.
inline float ref_half_to_float(std::uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}
inline std::uint16_t ref_float_to_half(float f) {
  const _Float16 x = static_cast<_Float16>(f);
  std::uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

// bfloat16 reference by a different route: the two bfloat16 neighbours of f, compared in double.
inline std::uint16_t ref_float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;  // only NaN-ness is compared for NaN inputs
  const std::uint32_t u = f32_bits(f);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);  // truncation (towards zero)
  if ((u & 0xffffu) == 0) return lo;
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);  // next away from zero (may be inf)
  const double vlo = f32_from(static_cast<std::uint32_t>(lo) << 16);
  // hi == 0x7f80/0xff80 is infinity; treat the distance by its would-be value 2^128.
  double vhi = f32_from(static_cast<std::uint32_t>(hi) << 16);
  if (std::isinf(vhi)) vhi = std::copysign(std::ldexp(1.0, 128), vhi);
  const double dlo = std::fabs(static_cast<double>(f) - vlo);
  const double dhi = std::fabs(static_cast<double>(f) - vhi);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

inline bool half_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
inline bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Raw storage for a gradient of any dtype, with a GradSpan view. `offset_bytes` shifts the data
// away from the allocation's alignment (to test unaligned starts).
struct Buffer {
  std::vector<unsigned char> bytes;
  std::size_t offset = 0;
  std::int64_t numel = 0;
  DType dtype = DType::Float32;

  Buffer(DType d, std::int64_t n, std::size_t offset_bytes = 0)
      : bytes(static_cast<std::size_t>(n) * dtype_size(d) + offset_bytes + 64),
        offset(offset_bytes), numel(n), dtype(d) {}
  void* data() { return bytes.data() + offset; }
  GradSpan span() { return GradSpan{data(), numel, dtype}; }
  // Element i as raw bits (zero-extended).
  std::uint64_t get(std::int64_t i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data() + offset + static_cast<std::size_t>(i) * dtype_size(dtype), dtype_size(dtype));
    return v;
  }
  void set(std::int64_t i, std::uint64_t v) {
    std::memcpy(bytes.data() + offset + static_cast<std::size_t>(i) * dtype_size(dtype), &v, dtype_size(dtype));
  }
};

// Bits of a typical gradient value in dtype d: normal numbers in roughly [-2^e, 2^e].
inline std::uint64_t random_finite_bits(DType d, std::mt19937_64& rng, int max_exp = 8) {
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> ex(-20, max_exp);
  const double v = std::ldexp(mant(rng), ex(rng));
  switch (d) {
    case DType::Float32: return f32_bits(static_cast<float>(v));
    case DType::Float16: return ref_float_to_half(static_cast<float>(v));
    case DType::BFloat16: return ref_float_to_bf16(static_cast<float>(v));
    case DType::Float64: {
      std::uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
  }
  return 0;
}

enum class Special { PosInf, NegInf, NaN };

inline std::uint64_t special_bits(DType d, Special s) {
  switch (d) {
    case DType::Float32:
      return s == Special::PosInf ? 0x7f800000u : s == Special::NegInf ? 0xff800000u : 0x7fc00000u;
    case DType::Float16:
      return s == Special::PosInf ? 0x7c00u : s == Special::NegInf ? 0xfc00u : 0x7e00u;
    case DType::BFloat16:
      return s == Special::PosInf ? 0x7f80u : s == Special::NegInf ? 0xff80u : 0x7fc0u;
    case DType::Float64:
      return s == Special::PosInf   ? 0x7ff0000000000000ull
             : s == Special::NegInf ? 0xfff0000000000000ull
                                    : 0x7ff8000000000000ull;
  }
  return 0;
}

inline const char* special_name(Special s) {
  return s == Special::PosInf ? "inf" : s == Special::NegInf ? "-inf" : "nan";
}

inline constexpr DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64};

}  // namespace autocastgen::kernels::testing
