// AVX2/F16C span loops of the CPU unscale kernel: the shared element logic on 256-bit lanes.
//
// This file is compiled with -mavx2 -mfma -mf16c. Everything here except avx2_span_kernels() has
// internal linkage, and the shared headers force-inline their functions (Note [always inline on
// the host] in hd.h), so no AVX2 code can leak into the baseline path through the linker.
#include <immintrin.h>

#include <cstdint>

#include "autocastgen/kernels/scaler_element.h"
#include "span_kernels.h"

namespace autocastgen::kernels::detail {
namespace {

#define AVX2_LANE_FN static inline __attribute__((always_inline))

// Note [lanes] in scaler_element.h: these mirror ScalarLane<D>, eight (four for double) elements
// at a time (sixteen for bfloat16). Flags are all-ones in the elements that are inf or NaN.
struct F32x8 {
  using Stored = __m256;
  using Wide = __m256;
  using Flag = __m256i;
  static constexpr int kWidth = 8;
  static constexpr int kBytes = 4;
  AVX2_LANE_FN Wide broadcast(float inv) { return _mm256_set1_ps(inv); }
  AVX2_LANE_FN Flag nonfinite(Stored s) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(s), e), e);
  }
  AVX2_LANE_FN Wide widen(Stored s) { return s; }
  AVX2_LANE_FN Stored narrow(Wide w) { return w; }
  AVX2_LANE_FN Wide mul(Wide a, Wide b) { return _mm256_mul_ps(a, b); }
  AVX2_LANE_FN Flag merge(Flag a, Flag b) { return _mm256_or_si256(a, b); }
  AVX2_LANE_FN Flag no_flag() { return _mm256_setzero_si256(); }
  AVX2_LANE_FN bool any(Flag f) { return _mm256_testz_si256(f, f) == 0; }
  AVX2_LANE_FN Stored load(const unsigned char* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  AVX2_LANE_FN void store(unsigned char* p, Stored v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
};

struct F64x4 {
  using Stored = __m256d;
  using Wide = __m256d;
  using Flag = __m256i;
  static constexpr int kWidth = 4;
  static constexpr int kBytes = 8;
  AVX2_LANE_FN Wide broadcast(float inv) { return _mm256_set1_pd(static_cast<double>(inv)); }
  AVX2_LANE_FN Flag nonfinite(Stored s) {
    const __m256i e = _mm256_set1_epi64x(0x7ff0000000000000LL);
    return _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_castpd_si256(s), e), e);
  }
  AVX2_LANE_FN Wide widen(Stored s) { return s; }
  AVX2_LANE_FN Stored narrow(Wide w) { return w; }
  AVX2_LANE_FN Wide mul(Wide a, Wide b) { return _mm256_mul_pd(a, b); }
  AVX2_LANE_FN Flag merge(Flag a, Flag b) { return _mm256_or_si256(a, b); }
  AVX2_LANE_FN Flag no_flag() { return _mm256_setzero_si256(); }
  AVX2_LANE_FN bool any(Flag f) { return _mm256_testz_si256(f, f) == 0; }
  AVX2_LANE_FN Stored load(const unsigned char* p) { return _mm256_loadu_pd(reinterpret_cast<const double*>(p)); }
  AVX2_LANE_FN void store(unsigned char* p, Stored v) { _mm256_storeu_pd(reinterpret_cast<double*>(p), v); }
};

// Eight float16 values in one 128-bit register (F16C converts eight at a time).
struct F16x8 {
  using Stored = __m128i;
  using Wide = __m256;
  using Flag = __m128i;
  static constexpr int kWidth = 8;
  static constexpr int kBytes = 2;
  AVX2_LANE_FN Wide broadcast(float inv) { return _mm256_set1_ps(inv); }
  AVX2_LANE_FN Flag nonfinite(Stored s) {
    const __m128i e = _mm_set1_epi16(0x7c00);
    return _mm_cmpeq_epi16(_mm_and_si128(s, e), e);
  }
  AVX2_LANE_FN Wide widen(Stored s) { return _mm256_cvtph_ps(s); }
  AVX2_LANE_FN Stored narrow(Wide w) { return _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  AVX2_LANE_FN Wide mul(Wide a, Wide b) { return _mm256_mul_ps(a, b); }
  AVX2_LANE_FN Flag merge(Flag a, Flag b) { return _mm_or_si128(a, b); }
  AVX2_LANE_FN Flag no_flag() { return _mm_setzero_si128(); }
  AVX2_LANE_FN bool any(Flag f) { return _mm_testz_si128(f, f) == 0; }
  AVX2_LANE_FN Stored load(const unsigned char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  AVX2_LANE_FN void store(unsigned char* p, Stored v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
};

// Sixteen bfloat16 values per 256-bit register. Widening interleaves them with zeros inside each
// 128-bit half (unpacklo/unpackhi), and narrowing packs inside each half again, which restores the
// original order, so no cross-lane shuffle is needed. The wide value is a pair of float vectors
// whose element order is permuted, which elementwise math does not mind.
struct FloatPair {
  __m256 lo;
  __m256 hi;
};

struct BF16x16 {
  using Stored = __m256i;
  using Wide = FloatPair;
  using Flag = __m256i;
  static constexpr int kWidth = 16;
  static constexpr int kBytes = 2;
  AVX2_LANE_FN Wide broadcast(float inv) { return {_mm256_set1_ps(inv), _mm256_set1_ps(inv)}; }
  AVX2_LANE_FN Flag nonfinite(Stored s) {
    const __m256i e = _mm256_set1_epi16(0x7f80);
    return _mm256_cmpeq_epi16(_mm256_and_si256(s, e), e);
  }
  AVX2_LANE_FN Wide widen(Stored s) {
    const __m256i zero = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, s)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, s))};
  }
  // float_to_bf16_bits() of scaler_element.h, eight at a time; results are <= 0xffff per 32 bits.
  AVX2_LANE_FN __m256i round8(__m256 w) {
    const __m256i u = _mm256_castps_si256(w);
    const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  }
  AVX2_LANE_FN Stored narrow(Wide w) { return _mm256_packus_epi32(round8(w.lo), round8(w.hi)); }
  AVX2_LANE_FN Wide mul(Wide a, Wide b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  AVX2_LANE_FN Flag merge(Flag a, Flag b) { return _mm256_or_si256(a, b); }
  AVX2_LANE_FN Flag no_flag() { return _mm256_setzero_si256(); }
  AVX2_LANE_FN bool any(Flag f) { return _mm256_testz_si256(f, f) == 0; }
  AVX2_LANE_FN Stored load(const unsigned char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  AVX2_LANE_FN void store(unsigned char* p, Stored v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
};

#undef AVX2_LANE_FN

template <class L>
__attribute__((always_inline)) inline void unscale_block(unsigned char* p, typename L::Wide inv,
                                                         typename L::Flag& acc) {
  L::store(p, unscale_value<L>(L::load(p), inv, acc));
}

template <class L>
bool run_span(void* data, std::int64_t n, float inv, bool write) {
  constexpr std::int64_t W = L::kWidth;
  auto* p = static_cast<unsigned char*>(data);
  const typename L::Wide vinv = L::broadcast(inv);
  typename L::Flag acc0 = L::no_flag();
  typename L::Flag acc1 = L::no_flag();
  std::int64_t i = 0;
  if (write) {
    // Two independent accumulators so consecutive blocks do not wait on each other.
    for (; i + 2 * W <= n; i += 2 * W) {
      unscale_block<L>(p + i * L::kBytes, vinv, acc0);
      unscale_block<L>(p + (i + W) * L::kBytes, vinv, acc1);
    }
    for (; i + W <= n; i += W) unscale_block<L>(p + i * L::kBytes, vinv, acc0);
  } else {
    for (; i + 2 * W <= n; i += 2 * W) {
      check_value<L>(L::load(p + i * L::kBytes), acc0);
      check_value<L>(L::load(p + (i + W) * L::kBytes), acc1);
    }
    for (; i + W <= n; i += W) check_value<L>(L::load(p + i * L::kBytes), acc0);
  }
  if (i < n) {
    // The tail goes through the same vector code via a zero-padded buffer (zeros are finite).
    alignas(32) unsigned char tail[W * L::kBytes] = {};
    const std::size_t bytes = static_cast<std::size_t>(n - i) * L::kBytes;
    __builtin_memcpy(tail, p + i * L::kBytes, bytes);
    if (write) {
      unscale_block<L>(tail, vinv, acc0);
      __builtin_memcpy(p + i * L::kBytes, tail, bytes);
    } else {
      check_value<L>(L::load(tail), acc0);
    }
  }
  return L::any(L::merge(acc0, acc1));
}

}  // namespace

const SpanKernels& avx2_span_kernels() {
  // Order follows DType: Float32, Float16, BFloat16, Float64.
  static const SpanKernels kernels{{&run_span<F32x8>, &run_span<F16x8>, &run_span<BF16x16>, &run_span<F64x4>}};
  return kernels;
}

}  // namespace autocastgen::kernels::detail
