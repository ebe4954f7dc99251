// Independent fp8 references for the kernel tests: decoding by the format's definition, and
// encoding by a nearest-value search in double (no bit tricks shared with the kernels).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autocastgen/kernels/fp8_element.h"

namespace autocastgen::kernels::fp8::testing {

struct FormatSpec {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_inf;  // e5m2: exponent all ones is inf/NaN; e4m3fn: only S.1111.111 is NaN
};

inline FormatSpec spec(Fp8Format f) {
  return f == Fp8Format::E4M3FN ? FormatSpec{4, 3, 7, false} : FormatSpec{5, 2, 15, true};
}

// The value of an fp8 code (NaN and inf as double's).
inline double decode(std::uint8_t code, Fp8Format f) {
  const FormatSpec s = spec(f);
  const int sign = code >> 7;
  const int e = (code >> s.mantissa_bits) & ((1 << s.exponent_bits) - 1);
  const int m = code & ((1 << s.mantissa_bits) - 1);
  const int e_max = (1 << s.exponent_bits) - 1;
  double v;
  if (!s.has_inf && e == e_max && m == (1 << s.mantissa_bits) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (s.has_inf && e == e_max) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - s.bias - s.mantissa_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -s.mantissa_bits), e - s.bias);
  }
  return sign ? -v : v;
}

inline bool is_nan_code(std::uint8_t code, Fp8Format f) { return std::isnan(decode(code, f)); }

// Positive finite codes 0x00..max, in increasing value.
inline const std::vector<double>& positive_values(Fp8Format f) {
  static const std::vector<double> e4m3 = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7e; ++c) v.push_back(decode(static_cast<std::uint8_t>(c), Fp8Format::E4M3FN));
    return v;
  }();
  static const std::vector<double> e5m2 = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7b; ++c) v.push_back(decode(static_cast<std::uint8_t>(c), Fp8Format::E5M2));
    return v;
  }();
  return f == Fp8Format::E4M3FN ? e4m3 : e5m2;
}

inline double max_value(Fp8Format f) { return positive_values(f).back(); }

// The saturating cast's reference: NaN -> 0x7f with the sign; |x| >= max -> max; otherwise the
// nearest value, ties to the even code.
inline std::uint8_t encode(double x, Fp8Format f) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7f);
  const double a = std::fabs(x);
  const std::vector<double>& vals = positive_values(f);
  if (a >= vals.back()) return static_cast<std::uint8_t>(sign | (vals.size() - 1));
  // vals[lo] <= a < vals[lo + 1]
  const auto it = std::upper_bound(vals.begin(), vals.end(), a);
  const auto hi = static_cast<std::size_t>(it - vals.begin());
  const std::size_t lo = hi - 1;
  const double dlo = a - vals[lo];
  const double dhi = vals[hi] - a;
  std::size_t code = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint8_t>(sign | code);
}

}  // namespace autocastgen::kernels::fp8::testing
