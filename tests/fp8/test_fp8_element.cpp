// fp8 element logic (no torch): the cast against an independent reference, amax, the scale rule, delayed history.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/fp8_scale.h"
#include "fp8_reference.h"

namespace autocastgen::kernels::fp8 {
namespace {

using testing::decode;
using testing::encode;

constexpr Fp8Format kFormats[] = {Fp8Format::E4M3FN, Fp8Format::E5M2};

float f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void expect_cast(float x, Fp8Format f) {
  ASSERT_EQ(float_to_fp8(x, f), encode(static_cast<double>(x), f))
      << fp8_format_name(f) << " x=" << x << " bits=0x" << std::hex << bits(x);
}

TEST(Fp8Element, FormatsDecodeAsSpecified) {
  EXPECT_EQ(decode(0x7e, Fp8Format::E4M3FN), 448.0);
  EXPECT_EQ(decode(0x01, Fp8Format::E4M3FN), std::ldexp(1.0, -9));
  EXPECT_EQ(decode(0x08, Fp8Format::E4M3FN), std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isnan(decode(0x7f, Fp8Format::E4M3FN)));
  EXPECT_EQ(decode(0x7b, Fp8Format::E5M2), 57344.0);
  EXPECT_EQ(decode(0x01, Fp8Format::E5M2), std::ldexp(1.0, -16));
  EXPECT_TRUE(std::isinf(decode(0x7c, Fp8Format::E5M2)));
  EXPECT_EQ(fp8_max(Fp8Format::E4M3FN), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::E5M2), 57344.0f);
}

// Every representable value, both neighbours of it, every midpoint between neighbours and both
// float neighbours of each midpoint: all the places where rounding can go wrong.
TEST(Fp8Element, CastRoundsEveryBoundaryLikeTheReference) {
  for (Fp8Format f : kFormats) {
    const std::vector<double>& vals = testing::positive_values(f);
    for (std::size_t i = 0; i < vals.size(); ++i) {
      for (double sign : {1.0, -1.0}) {
        const auto v = static_cast<float>(sign * vals[i]);
        for (float x : {v, std::nextafter(v, 0.0f), std::nextafter(v, static_cast<float>(sign) * INFINITY)}) expect_cast(x, f);
        if (i + 1 < vals.size()) {
          const auto mid = static_cast<float>(sign * (vals[i] + vals[i + 1]) / 2);  // exact in float
          for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, static_cast<float>(sign) * INFINITY)}) expect_cast(x, f);
        }
      }
    }
  }
}

TEST(Fp8Element, CastSpecials) {
  for (Fp8Format f : kFormats) {
    const std::uint8_t max_code = f == Fp8Format::E4M3FN ? 0x7e : 0x7b;
    // NaN: 0x7f with the input's sign, whatever the payload.
    for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u}) {
      EXPECT_EQ(float_to_fp8(f32(nan), f), 0x7f) << fp8_format_name(f);
      EXPECT_EQ(float_to_fp8(f32(nan | 0x80000000u), f), 0xff) << fp8_format_name(f);
    }
    // Infinities and everything at or above max saturate (the clamp).
    EXPECT_EQ(float_to_fp8(INFINITY, f), max_code);
    EXPECT_EQ(float_to_fp8(-INFINITY, f), 0x80 | max_code);
    EXPECT_EQ(float_to_fp8(std::numeric_limits<float>::max(), f), max_code);
    EXPECT_EQ(float_to_fp8(fp8_max(f), f), max_code);
    EXPECT_EQ(float_to_fp8(std::nextafter(fp8_max(f), INFINITY), f), max_code);
    EXPECT_EQ(float_to_fp8(-1e30f, f), 0x80 | max_code);
    // Signed zeros, float subnormals and values below half the smallest subnormal.
    EXPECT_EQ(float_to_fp8(0.0f, f), 0x00);
    EXPECT_EQ(float_to_fp8(-0.0f, f), 0x80);
    EXPECT_EQ(float_to_fp8(f32(1), f), 0x00);
    EXPECT_EQ(float_to_fp8(-f32(0x007fffff), f), 0x80);
    const float min_sub = f == Fp8Format::E4M3FN ? std::ldexp(1.0f, -9) : std::ldexp(1.0f, -16);
    EXPECT_EQ(float_to_fp8(min_sub, f), 0x01);
    EXPECT_EQ(float_to_fp8(min_sub / 2, f), 0x00);  // a tie, to even (0)
    EXPECT_EQ(float_to_fp8(std::nextafter(min_sub / 2, 1.0f), f), 0x01);
    EXPECT_EQ(float_to_fp8(min_sub * 1.5f, f), 0x02);  // a tie between 1 and 2: to even (2)
  }
}

// A stride through all 2^32 float bit patterns (every exponent, sign and many mantissas) and
// random floats in the range scaled tensors occupy.
TEST(Fp8Element, CastMatchesTheReferenceOnManyFloats) {
  for (Fp8Format f : kFormats) {
    for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) expect_cast(f32(static_cast<std::uint32_t>(u)), f);
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> mant(-1.0, 1.0);
    std::uniform_int_distribution<int> ex(-24, 18);
    for (int i = 0; i < 200000; ++i) expect_cast(static_cast<float>(std::ldexp(mant(rng), ex(rng))), f);
  }
}

TEST(Fp8Element, QuantizeScalesInFloatThenCasts) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> x(-3.0f, 3.0f);
  for (Fp8Format f : kFormats) {
    for (float scale : {1.0f, 149.33333f, 0.001f, 1e10f}) {
      std::uint32_t amax = 0;
      float expected_amax = 0.0f;
      for (int i = 0; i < 1000; ++i) {
        const float v = x(rng);
        const std::uint32_t code = f == Fp8Format::E4M3FN
                                       ? quantize_element<Fp8Format::E4M3FN, true, ScalarWords>(v, scale, amax)
                                       : quantize_element<Fp8Format::E5M2, true, ScalarWords>(v, scale, amax);
        ASSERT_EQ(code, encode(static_cast<double>(v * scale), f));
        expected_amax = std::max(expected_amax, std::fabs(v));
      }
      EXPECT_EQ(f32(amax), expected_amax);
    }
  }
}

TEST(Fp8Element, AmaxPropagatesNanAndKeepsInfinity) {
  using W = ScalarWords;
  std::uint32_t acc = 0;
  for (float v : {1.0f, -3.0f, -0.0f}) acc = W::max(acc, magnitude_bits<W>(v));
  EXPECT_EQ(f32(acc), 3.0f);
  acc = W::max(acc, magnitude_bits<W>(-INFINITY));
  EXPECT_EQ(f32(acc), INFINITY);
  acc = W::max(acc, magnitude_bits<W>(-std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(std::isnan(f32(acc)));
  acc = W::max(acc, magnitude_bits<W>(1e30f));  // a NaN stays
  EXPECT_TRUE(std::isnan(f32(acc)));
}

TEST(Fp8Element, ScaleRule) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The quotient in double, rounded once.
  for (float amax : {1.0f, 3.0f, 0.02f, 1e-10f, 12345.678f}) {
    EXPECT_EQ(scale_from_amax(amax, 448.0f, 0, 1.0f), static_cast<float>(448.0 / static_cast<double>(amax)));
    EXPECT_EQ(scale_from_amax(amax, 448.0f, 3, 1.0f), static_cast<float>(448.0 / static_cast<double>(amax) / 8.0));
  }
  // Zero: the fallback; non-finite: NaN; tiny: capped at 2^126 so that 1/scale is normal.
  EXPECT_EQ(scale_from_amax(0.0f, 448.0f, 0, 1.0f), 1.0f);
  EXPECT_EQ(scale_from_amax(0.0f, 448.0f, 0, 0.25f), 0.25f);
  EXPECT_TRUE(std::isnan(scale_from_amax(INFINITY, 448.0f, 0, 1.0f)));
  EXPECT_TRUE(std::isnan(scale_from_amax(nan, 57344.0f, 0, 1.0f)));
  EXPECT_EQ(scale_from_amax(1e-38f, 448.0f, 0, 1.0f), kMaxScale);
  EXPECT_EQ(scale_from_amax(f32(1), 448.0f, 0, 1.0f), kMaxScale);
  EXPECT_EQ(kMaxScale, std::ldexp(1.0f, 126));
  EXPECT_TRUE(std::isnormal(inverse_scale(kMaxScale)));
  // A value at amax lands on fp8's max (or just under it, never above after the clamp).
  for (float amax : {0.7f, 3.3f, 1e-5f}) {
    const float s = scale_from_amax(amax, 448.0f, 0, 1.0f);
    EXPECT_EQ(float_to_fp8(amax * s, Fp8Format::E4M3FN), 0x7e);
  }
  EXPECT_EQ(dequant_scale_for_pass(4.0f, 1.0f), 0.25f);
  EXPECT_TRUE(std::isnan(dequant_scale_for_pass(4.0f, INFINITY)));
  EXPECT_TRUE(std::isnan(dequant_scale_for_pass(4.0f, nan)));
}

// Note [fp8 power-of-two scale]: the scale rule rounded down to a power of two, against
// 2^floor(log2(fp8_max / amax / 2^margin)) taken from the double quotient with frexp (which also
// checks that rounding the quotient to float32 never carries it up to the next power of two).
TEST(Fp8Element, PowerOfTwoScale) {
  std::mt19937 rng(38);
  std::uniform_int_distribution<std::uint32_t> any_positive(1u, 0x7f7fffffu);  // subnormals .. FLT_MAX
  for (Fp8Format f : kFormats) {
    const float max = fp8_max(f);
    for (int i = 0; i < 200000; ++i) {
      const float amax = f32(any_positive(rng));
      const std::int32_t margin = i % 5 == 0 ? static_cast<std::int32_t>(i % 65) : i % 3;
      const double q = std::min(std::ldexp(static_cast<double>(max) / static_cast<double>(amax), -margin),
                                std::ldexp(1.0, 126));
      int e = 0;
      (void)std::frexp(q, &e);
      const float expected = q < std::ldexp(1.0, -126) ? 0.0f : static_cast<float>(std::ldexp(1.0, e - 1));
      const float s = power_of_two_scale(amax, max, margin);
      ASSERT_EQ(bits(s), bits(expected)) << fp8_format_name(f) << " amax=" << amax << " margin=" << margin;
      if (expected != 0.0f) {
        ASSERT_EQ(bits(s), bits(scale_from_amax(amax, max, margin, 1.0f)) & 0x7f800000u);
      }
    }
  }
  // Zero: 1; non-finite: the canonical NaN; tiny: 2^126; margins shift the exponent.
  EXPECT_EQ(power_of_two_scale(0.0f, 448.0f, 0), 1.0f);
  EXPECT_EQ(power_of_two_scale(0.0f, 448.0f, 7), 1.0f);
  EXPECT_EQ(bits(power_of_two_scale(INFINITY, 448.0f, 0)), 0x7fc00000u);
  EXPECT_EQ(bits(power_of_two_scale(std::numeric_limits<float>::quiet_NaN(), 448.0f, 0)), 0x7fc00000u);
  EXPECT_EQ(power_of_two_scale(f32(1), 448.0f, 0), kMaxScale);
  EXPECT_EQ(power_of_two_scale(1.0f, 448.0f, 0), 256.0f);
  EXPECT_EQ(power_of_two_scale(1.0f, 448.0f, 2), 64.0f);
  EXPECT_EQ(power_of_two_scale(448.0f, 448.0f, 0), 1.0f);
  EXPECT_EQ(power_of_two_scale(std::nextafter(448.0f, 1000.0f), 448.0f, 0), 0.5f);
  EXPECT_EQ(power_of_two_scale(1.0f, 57344.0f, 0), 32768.0f);
  EXPECT_EQ(round_down_to_power_of_two(0.75f), 0.5f);
  EXPECT_EQ(round_down_to_power_of_two(f32(1)), 0.0f);  // a subnormal scale becomes +0
}

TEST(Fp8Element, DelayedHistoryRollsAndSkipsNonFinite) {
  constexpr std::int32_t kLen = 3;
  float ring[kLen] = {};
  std::int32_t next = 0;
  std::int32_t count = 0;
  float scale = 1.0f;
  const auto record = [&](float amax) {
    scale = delayed_record_and_rescale(ring, kLen, next, count, amax, scale, 448.0f, 0);
    next = (next + 1) % kLen;
    count = std::min(count + 1, kLen);
  };
  record(2.0f);
  EXPECT_EQ(scale, 224.0f);
  record(4.0f);
  EXPECT_EQ(scale, 112.0f);  // max over {2, 4}
  record(1.0f);
  EXPECT_EQ(scale, 112.0f);  // {2, 4, 1}
  record(1.0f);
  EXPECT_EQ(scale, 112.0f);  // {1, 4, 1}: the 2 was overwritten
  record(0.5f);
  EXPECT_EQ(scale, 448.0f);  // {1, 0.5, 1}: the 4 has left the window
  record(INFINITY);          // recorded, never a scale
  EXPECT_EQ(ring[2], INFINITY);
  EXPECT_EQ(scale, 448.0f);  // {1, 0.5, inf}
  record(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(scale, 896.0f);  // {0.5, NaN, inf}
  record(0.0f);
  record(0.0f);
  record(0.0f);
  EXPECT_EQ(scale, 896.0f);  // an all-zero window keeps the previous scale
  EXPECT_EQ(history_max_finite(ring, 0), 0.0f);
  // A NaN previous scale (the first cast met a NaN) is never the fallback.
  float fresh[2] = {};
  EXPECT_EQ(delayed_record_and_rescale(fresh, 2, 0, 0, std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::quiet_NaN(), 448.0f, 0),
            1.0f);
}

}  // namespace
}  // namespace autocastgen::kernels::fp8
