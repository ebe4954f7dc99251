// CPU fp8 kernels (no torch): every ISA path and source dtype against the scalar element logic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "autocastgen/kernels/fp8_cpu.h"
#include "autocastgen/kernels/fp8_scale.h"
#include "fp8_reference.h"
#include "kernel_test_util.h"

namespace autocastgen::kernels::fp8 {
namespace {

using kernels::testing::Buffer;
using kernels::testing::f32_bits;
using kernels::testing::f32_from;

constexpr Fp8Format kFormats[] = {Fp8Format::E4M3FN, Fp8Format::E5M2};
constexpr DType kSources[] = {DType::Float32, DType::BFloat16, DType::Float16};

std::vector<CpuIsa> available_isas() {
  std::vector<CpuIsa> isas{CpuIsa::Baseline};
  if (best_cpu_isa() == CpuIsa::Avx2) isas.push_back(CpuIsa::Avx2);
  return isas;
}

// The source element i widened to float by the test's own route.
float widened(const Buffer& b, std::int64_t i) {
  const std::uint64_t raw = b.get(i);
  switch (b.dtype) {
    case DType::Float32: return f32_from(static_cast<std::uint32_t>(raw));
    case DType::BFloat16: return f32_from(static_cast<std::uint32_t>(raw) << 16);
    case DType::Float16: return kernels::testing::ref_half_to_float(static_cast<std::uint16_t>(raw));
    case DType::Float64: break;
  }
  return 0.0f;
}

// A source of n elements: random values over a wide range, and specials at both ends of the
// vector blocks (the first and last 40 positions) so the tail paths see them too.
Buffer make_source(DType d, std::int64_t n, std::uint32_t seed, bool specials, std::size_t offset_bytes = 0) {
  Buffer b(d, n, offset_bytes);
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < n; ++i) b.set(i, kernels::testing::random_finite_bits(d, rng, 12));
  if (specials && n > 0) {
    using kernels::testing::Special;
    std::uniform_int_distribution<std::int64_t> pos(0, n - 1);
    const Special kinds[] = {Special::PosInf, Special::NegInf};
    for (Special s : kinds) b.set(pos(rng), kernels::testing::special_bits(d, s));
    b.set(n - 1, kernels::testing::special_bits(d, Special::NegInf));
  }
  return b;
}

float reference_amax(const Buffer& b) {
  float best = 0.0f;
  for (std::int64_t i = 0; i < b.numel; ++i) {
    const float a = std::fabs(widened(b, i));
    if (std::isnan(a)) return a;
    best = std::max(best, a);
  }
  return best;
}

Fp8Source source_of(Buffer& b) { return Fp8Source{b.data(), b.numel, b.dtype}; }

TEST(Fp8Cpu, CastAndAmaxMatchTheElementReference) {
  const std::int64_t sizes[] = {0, 1, 7, 31, 32, 33, 1000, 65536 + 17, 300001};
  for (CpuIsa isa : available_isas()) {
    for (DType d : kSources) {
      for (std::int64_t n : sizes) {
        Buffer src = make_source(d, n, static_cast<std::uint32_t>(n) * 7 + static_cast<std::uint32_t>(d), true);
        const float want_amax = reference_amax(src);
        const Fp8CpuOptions options{isa, &thread_executor()};
        const float got_amax = amax_cpu(source_of(src), options);
        ASSERT_EQ(f32_bits(got_amax), f32_bits(want_amax)) << cpu_isa_name(isa) << " " << dtype_name(d) << " n=" << n;
        for (Fp8Format f : kFormats) {
          for (float scale : {1.0f, 0.037f, 3.0e4f}) {
            std::vector<std::uint8_t> out(static_cast<std::size_t>(n) + 1, 0xaa);
            std::vector<std::uint8_t> out2(static_cast<std::size_t>(n) + 1, 0xaa);
            scale_cast_cpu(source_of(src), scale, f, out.data(), options);
            const float one_pass_amax = scale_cast_amax_cpu(source_of(src), scale, f, out2.data(), options);
            EXPECT_EQ(f32_bits(one_pass_amax), f32_bits(want_amax));
            for (std::int64_t i = 0; i < n; ++i) {
              const auto k = static_cast<std::size_t>(i);
              const std::uint8_t want = testing::encode(static_cast<double>(widened(src, i) * scale), f);
              ASSERT_EQ(out[k], want) << cpu_isa_name(isa) << " " << dtype_name(d) << " " << fp8_format_name(f)
                                      << " n=" << n << " i=" << i << " x=" << widened(src, i) << " scale=" << scale;
              ASSERT_EQ(out2[k], want);
            }
            EXPECT_EQ(out[static_cast<std::size_t>(n)], 0xaa) << "wrote past the end";
            EXPECT_EQ(out2[static_cast<std::size_t>(n)], 0xaa) << "wrote past the end";
          }
        }
      }
    }
  }
}

TEST(Fp8Cpu, NanAnywhereMakesTheAmaxNan) {
  for (CpuIsa isa : available_isas()) {
    for (DType d : kSources) {
      for (std::int64_t where : {std::int64_t{0}, std::int64_t{13}, std::int64_t{4095}, std::int64_t{70000}}) {
        Buffer src = make_source(d, 70001, 11, false);
        src.set(where, kernels::testing::special_bits(d, kernels::testing::Special::NaN));
        const Fp8CpuOptions options{isa, &thread_executor()};
        EXPECT_TRUE(std::isnan(amax_cpu(source_of(src), options))) << cpu_isa_name(isa) << " at " << where;
        std::vector<std::uint8_t> out(70001);
        EXPECT_TRUE(std::isnan(scale_cast_amax_cpu(source_of(src), 2.0f, Fp8Format::E4M3FN, out.data(), options)));
        EXPECT_EQ(out[static_cast<std::size_t>(where)] & 0x7f, 0x7f);  // the NaN itself stays NaN
      }
    }
  }
}

TEST(Fp8Cpu, InfinityIsTheAmaxAndSaturatesInTheCast) {
  Buffer src(DType::Float32, 5);
  const float vals[] = {1.0f, -INFINITY, 2.0f, -0.0f, 1e-45f};
  for (int i = 0; i < 5; ++i) src.set(i, f32_bits(vals[i]));
  for (CpuIsa isa : available_isas()) {
    const Fp8CpuOptions options{isa, &serial_executor()};
    EXPECT_EQ(amax_cpu(source_of(src), options), INFINITY);
    std::uint8_t out[5];
    scale_cast_cpu(source_of(src), 1.0f, Fp8Format::E5M2, out, options);
    EXPECT_EQ(out[0], 0x3c);  // 1.0
    EXPECT_EQ(out[1], 0xfb);  // -57344
    EXPECT_EQ(out[3], 0x80);  // -0.0
    EXPECT_EQ(out[4], 0x00);  // a float subnormal
  }
}

TEST(Fp8Cpu, AvxAndBaselineAgreeOnEveryFloatClass) {
  if (best_cpu_isa() != CpuIsa::Avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  // 2^20 bit patterns spread over the whole float range, NaNs and infinities included.
  const std::int64_t n = std::int64_t{1} << 20;
  Buffer src(DType::Float32, n);
  for (std::int64_t i = 0; i < n; ++i) src.set(i, static_cast<std::uint32_t>(i) * 4096u + static_cast<std::uint32_t>(i % 4096));
  for (Fp8Format f : kFormats) {
    std::vector<std::uint8_t> a(static_cast<std::size_t>(n));
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n));
    const float amax_a = scale_cast_amax_cpu(source_of(src), 1.0f, f, a.data(), {CpuIsa::Baseline, &serial_executor()});
    const float amax_b = scale_cast_amax_cpu(source_of(src), 1.0f, f, b.data(), {CpuIsa::Avx2, &serial_executor()});
    EXPECT_EQ(f32_bits(amax_a), f32_bits(amax_b));
    EXPECT_EQ(a, b) << fp8_format_name(f);
  }
}

TEST(Fp8Cpu, UnalignedStartsAndEveryTailLength) {
  for (CpuIsa isa : available_isas()) {
    for (DType d : kSources) {
      for (std::int64_t n = 0; n <= 70; ++n) {
        Buffer src = make_source(d, n, 5, true, dtype_size(d));  // shifted by one element
        std::vector<std::uint8_t> out(static_cast<std::size_t>(n) + 3, 0x55);
        scale_cast_cpu(source_of(src), 0.5f, Fp8Format::E4M3FN, out.data() + 1, {isa, &serial_executor()});
        EXPECT_EQ(out[0], 0x55);
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[static_cast<std::size_t>(i) + 1], testing::encode(widened(src, i) * 0.5f, Fp8Format::E4M3FN));
        }
        EXPECT_EQ(out[static_cast<std::size_t>(n) + 1], 0x55);
      }
    }
  }
}

// Row-wise scales: every slice's scale is power_of_two_scale of the slice's amax, every code the
// reference cast of x * scale (kNanScaleCode for a NaN scale, Note [fp8 NaN scale]).
TEST(Fp8Cpu, RowwiseCastMatchesTheElementReference) {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {1, 37}, {37, 1}, {13, 70}, {200, 333}, {3, 30001}};
  for (CpuIsa isa : available_isas()) {
    for (DType d : kSources) {
      for (auto [rows, cols] : shapes) {
        const std::int64_t n = rows * cols;
        Buffer src = make_source(d, n, static_cast<std::uint32_t>(n + cols), true);
        if (rows > 2) src.set(cols + (3 % cols), kernels::testing::special_bits(d, kernels::testing::Special::NaN));
        for (Fp8Slices slices : {Fp8Slices::Rows, Fp8Slices::Columns}) {
          const bool per_row = slices == Fp8Slices::Rows;
          const std::int64_t count = per_row ? rows : cols, length = per_row ? cols : rows;
          const auto at = [&](std::int64_t slice, std::int64_t j) { return per_row ? slice * cols + j : j * cols + slice; };
          for (Fp8Format f : kFormats) {
            for (std::int32_t margin : {0, 2}) {
              std::vector<std::uint8_t> out(static_cast<std::size_t>(n) + 1, 0xaa);
              std::vector<float> inv(static_cast<std::size_t>(count));
              rowwise_cast_cpu(source_of(src), rows, cols, slices, f, margin, out.data(), inv.data(),
                               {isa, &thread_executor()});
              EXPECT_EQ(out[static_cast<std::size_t>(n)], 0xaa) << "wrote past the end";
              for (std::int64_t s = 0; s < count; ++s) {
                float amax = 0.0f;
                for (std::int64_t j = 0; j < length && !std::isnan(amax); ++j) {
                  const float a = std::fabs(widened(src, at(s, j)));
                  amax = std::isnan(a) ? a : std::max(amax, a);
                }
                const float scale = power_of_two_scale(amax, fp8_max(f), margin);
                ASSERT_EQ(f32_bits(inv[static_cast<std::size_t>(s)]), f32_bits(inverse_scale(scale)))
                    << cpu_isa_name(isa) << " " << dtype_name(d) << " " << rows << "x" << cols << " slice " << s;
                for (std::int64_t j = 0; j < length; ++j) {
                  const std::int64_t i = at(s, j);
                  const std::uint8_t want =
                      std::isnan(scale) ? kNanScaleCode : testing::encode(static_cast<double>(widened(src, i) * scale), f);
                  ASSERT_EQ(out[static_cast<std::size_t>(i)], want)
                      << cpu_isa_name(isa) << " " << dtype_name(d) << " " << fp8_format_name(f) << " " << rows << "x"
                      << cols << (per_row ? " rows" : " columns") << " i=" << i;
                }
              }
            }
          }
        }
      }
    }
  }
  float x[6] = {};
  std::uint8_t out[6];
  float inv[3];
  EXPECT_THROW(rowwise_cast_cpu({x, 6, DType::Float32}, 2, 2, Fp8Slices::Rows, Fp8Format::E4M3FN, 0, out, inv),
               std::invalid_argument);
  EXPECT_THROW(rowwise_cast_cpu({x, 6, DType::Float32}, 2, 3, Fp8Slices::Rows, Fp8Format::E4M3FN, 65, out, inv),
               std::invalid_argument);
  rowwise_cast_cpu({x, 6, DType::Float32}, 2, 3, Fp8Slices::Columns, Fp8Format::E4M3FN, 0, out, inv);
  EXPECT_EQ(inv[0], 1.0f);  // an all-zero slice: scale 1
}

TEST(Fp8Cpu, RejectsBadArguments) {
  std::uint8_t out[4];
  double d[2] = {1.0, 2.0};
  EXPECT_THROW(amax_cpu({d, 2, DType::Float64}), std::invalid_argument);
  EXPECT_THROW(amax_cpu({nullptr, 3, DType::Float32}), std::invalid_argument);
  float f[2] = {1.0f, 2.0f};
  EXPECT_THROW(amax_cpu({f, -1, DType::Float32}), std::invalid_argument);
  EXPECT_THROW(scale_cast_cpu({f, 2, DType::Float32}, 1.0f, Fp8Format::E5M2, nullptr), std::invalid_argument);
  EXPECT_THROW(amax_cpu({reinterpret_cast<unsigned char*>(f) + 1, 1, DType::Float32}), std::invalid_argument);
  EXPECT_NO_THROW(scale_cast_cpu({nullptr, 0, DType::Float16}, 1.0f, Fp8Format::E5M2, nullptr));
  EXPECT_EQ(amax_cpu({nullptr, 0, DType::BFloat16}), 0.0f);
  if (best_cpu_isa() != CpuIsa::Avx2) {
    EXPECT_THROW(scale_cast_cpu({f, 2, DType::Float32}, 1.0f, Fp8Format::E5M2, out, {CpuIsa::Avx2}), std::invalid_argument);
  }
}

}  // namespace
}  // namespace autocastgen::kernels::fp8
