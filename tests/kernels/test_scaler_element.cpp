// Element logic shared by the CPU and CUDA kernels: conversions against references, unscale rules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "autocastgen/kernels/scaler_element.h"
#include "kernel_test_util.h"

namespace autocastgen::kernels {
namespace {

using namespace testing;  // NOLINT

TEST(HalfConversion, WidenMatchesCompilerForEveryHalf) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float ours = half_bits_to_float(bits);
    const float ref = ref_half_to_float(bits);
    if (half_is_nan(bits)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << h;
      ASSERT_EQ(f32_bits(ours) >> 31, h >> 15u) << "NaN sign, half " << std::hex << h;
      ASSERT_NE(f32_bits(ours) & 0x00400000u, 0u) << "NaN must come out quiet, half " << std::hex << h;
    } else {
      ASSERT_EQ(f32_bits(ours), f32_bits(ref)) << "half " << std::hex << h;
    }
  }
}

TEST(HalfConversion, NarrowRoundTripsEveryHalf) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if (half_is_nan(bits)) continue;
    ASSERT_EQ(float_to_half_bits(half_bits_to_float(bits)), bits) << std::hex << h;
  }
}

TEST(HalfConversion, NarrowMatchesCompilerOnTiesNeighboursAndRandomFloats) {
  std::vector<float> inputs;
  // Every half value, the midpoints between neighbours (ties) and one ulp either side of them.
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
    const float a = ref_half_to_float(static_cast<std::uint16_t>(h));
    const float b = h + 1 < 0x7c00u ? ref_half_to_float(static_cast<std::uint16_t>(h + 1)) : 65536.0f;
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      inputs.push_back(v);
      inputs.push_back(-v);
    }
  }
  for (float v : {65519.99f, 65520.0f, 70000.0f, 3e38f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), 2.9802322e-8f /* 2^-25 */}) {
    inputs.push_back(v);
    inputs.push_back(-v);
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < (1 << 22); ++i) inputs.push_back(f32_from(rng()));
  for (float f : inputs) {
    const std::uint16_t ours = float_to_half_bits(f);
    const std::uint16_t ref = ref_float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(half_is_nan(ours)) << f;
      ASSERT_EQ(ours >> 15, f32_bits(f) >> 31) << "NaN sign";
    } else {
      ASSERT_EQ(ours, ref) << "float bits 0x" << std::hex << f32_bits(f);
    }
  }
}

TEST(BFloat16Conversion, WidenIsExactForEveryBFloat16) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    ASSERT_EQ(f32_bits(bf16_bits_to_float(static_cast<std::uint16_t>(b))), b << 16);
  }
}

TEST(BFloat16Conversion, NarrowMatchesNearestEvenReference) {
  std::vector<float> inputs;
  for (std::uint32_t b = 0; b < 0x7f80u; ++b) {
    const std::uint32_t u = b << 16;
    for (std::uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      inputs.push_back(f32_from(u | low));
      inputs.push_back(f32_from(0x80000000u | u | low));
    }
  }
  std::mt19937 rng(99);
  for (int i = 0; i < (1 << 22); ++i) inputs.push_back(f32_from(rng()));
  for (float f : inputs) {
    const std::uint16_t ours = float_to_bf16_bits(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(bf16_is_nan(ours)) << std::hex << f32_bits(f);
      ASSERT_EQ(ours >> 15, f32_bits(f) >> 31) << "NaN sign";
    } else {
      ASSERT_EQ(ours, ref_float_to_bf16(f)) << "float bits 0x" << std::hex << f32_bits(f);
    }
  }
}

template <DType D>
typename ScalarLane<D>::Stored unscale_one(typename ScalarLane<D>::Stored x, float inv, bool& flag) {
  using L = ScalarLane<D>;
  typename L::Flag f = 0;
  const auto out = unscale_value<L>(x, L::broadcast(inv), f);
  flag = f != 0;
  return out;
}

TEST(UnscaleValue, FlagFollowsTheInputNotTheProduct) {
  bool flag = false;
  // fp16: 65504 * 2 overflows, but the input was finite: no flag (PyTorch's rule).
  EXPECT_EQ(unscale_one<DType::Float16>(0x7bffu, 2.0f, flag), 0x7c00u);
  EXPECT_FALSE(flag);
  EXPECT_EQ(unscale_one<DType::Float32>(3e38f, 10.0f, flag), std::numeric_limits<float>::infinity());
  EXPECT_FALSE(flag);
  // Inputs that are inf or NaN set it, whatever inv_scale is (0 included).
  EXPECT_TRUE(std::isnan(unscale_one<DType::Float32>(std::numeric_limits<float>::infinity(), 0.0f, flag)));
  EXPECT_TRUE(flag);
  unscale_one<DType::BFloat16>(0xff80u, 0.5f, flag);
  EXPECT_TRUE(flag);
  unscale_one<DType::Float16>(0x7e01u, 0.5f, flag);
  EXPECT_TRUE(flag);
  unscale_one<DType::Float64>(std::numeric_limits<double>::quiet_NaN(), 0.5f, flag);
  EXPECT_TRUE(flag);
}

TEST(UnscaleValue, ComputesInTheWideTypeAndRoundsOnce) {
  bool flag = true;
  // bf16 1.0078125 (0x3f81) * 0.5f = 0.50390625, exact: 0x3f01.
  EXPECT_EQ(unscale_one<DType::BFloat16>(0x3f81u, 0.5f, flag), 0x3f01u);
  EXPECT_FALSE(flag);
  // fp16: 3 * (1/3) in float is 1.0000000298..., which rounds to 1.0 in fp16.
  EXPECT_EQ(unscale_one<DType::Float16>(0x4200u, 1.0f / 3.0f, flag), 0x3c00u);
  // fp16 subnormal outputs survive: 2^-14 (0x0400) * 0.25 = 2^-16 = subnormal 0x0100.
  EXPECT_EQ(unscale_one<DType::Float16>(0x0400u, 0.25f, flag), 0x0100u);
  // double gradients use the float inv_scale widened to double.
  EXPECT_EQ(unscale_one<DType::Float64>(3.0, 0.1f, flag), 3.0 * static_cast<double>(0.1f));
  // float subnormal results are kept (no flush to zero).
  EXPECT_EQ(unscale_one<DType::Float32>(1e-30f, 1e-10f, flag), 1e-30f * 1e-10f);
  EXPECT_NE(1e-30f * 1e-10f, 0.0f);
}

TEST(UnscaleValue, WritesOnlyWhenInvScaleIsNotOne) {
  EXPECT_FALSE(unscale_writes(1.0f));
  EXPECT_TRUE(unscale_writes(0.5f));
  EXPECT_TRUE(unscale_writes(std::nextafter(1.0f, 2.0f)));
  EXPECT_TRUE(unscale_writes(std::numeric_limits<float>::quiet_NaN()));
}

TEST(CheckValue, FlagsExactlyInfAndNaN) {
  using L = ScalarLane<DType::Float16>;
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    L::Flag f = 0;
    check_value<L>(static_cast<std::uint16_t>(h), f);
    ASSERT_EQ(f != 0, !std::isfinite(ref_half_to_float(static_cast<std::uint16_t>(h)))) << std::hex << h;
  }
  using B = ScalarLane<DType::BFloat16>;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    B::Flag f = 0;
    check_value<B>(static_cast<std::uint16_t>(b), f);
    ASSERT_EQ(f != 0, !std::isfinite(f32_from(b << 16))) << std::hex << b;
  }
}

}  // namespace
}  // namespace autocastgen::kernels
