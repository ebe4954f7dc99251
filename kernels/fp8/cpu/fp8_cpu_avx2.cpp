// AVX2/F16C span loops of the CPU fp8 kernels: the shared element logic on eight lanes at a time.
//
// Compiled with -mavx2 -mfma -mf16c. Everything here except avx2_fp8_span_kernels() has internal
// linkage and the shared headers force-inline their functions (Note [always inline on the host]
// in hd.h), so no AVX2 code can reach the baseline path through the linker.
#include <immintrin.h>

#include <cstdint>

#include "autocastgen/kernels/fp8_element.h"
#include "fp8_span_kernels.h"

namespace autocastgen::kernels::fp8::detail {
namespace {

#define AVX2_FN static inline __attribute__((always_inline))

// Note [fp8 words] in fp8_element.h: ScalarWords, eight lanes wide.
struct Avx2Words {
  using U = __m256i;
  using F = __m256;
  AVX2_FN U set(std::uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  AVX2_FN U bits(F x) { return _mm256_castps_si256(x); }
  AVX2_FN F floats(U u) { return _mm256_castsi256_ps(u); }
  AVX2_FN U and_(U a, U b) { return _mm256_and_si256(a, b); }
  AVX2_FN U or_(U a, U b) { return _mm256_or_si256(a, b); }
  AVX2_FN U add(U a, U b) { return _mm256_add_epi32(a, b); }
  AVX2_FN U sub(U a, U b) { return _mm256_sub_epi32(a, b); }
  template <int S>
  AVX2_FN U srl(U a) { return _mm256_srli_epi32(a, S); }
  AVX2_FN U gt(U a, U b) { return _mm256_cmpgt_epi32(a, b); }
  AVX2_FN U select(U mask, U if_set, U if_clear) { return _mm256_blendv_epi8(if_clear, if_set, mask); }
  AVX2_FN U max(U a, U b) { return _mm256_max_epu32(a, b); }
  AVX2_FN F fadd(F a, F b) { return _mm256_add_ps(a, b); }
  AVX2_FN F fmul(F a, F b) { return _mm256_mul_ps(a, b); }
};

// Eight source elements widened to float (exact).
template <DType D>
AVX2_FN __m256 load8(const unsigned char* p) {
  if constexpr (D == DType::Float32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (D == DType::BFloat16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// Four vectors of eight codes (one per 32-bit word, <= 0xff) to 32 consecutive bytes. The packs
// work inside 128-bit halves, leaving the dwords in the order c0lo c1lo c2lo c3lo | c0hi c1hi
// c2hi c3hi; one cross-lane permute restores element order.
AVX2_FN void store32(std::uint8_t* out, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i packed = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
}

#undef AVX2_FN

constexpr std::int64_t kBlock = 32;

template <DType D>
constexpr std::int64_t element_bytes() {
  return D == DType::Float32 ? 4 : 2;
}

template <DType D>
__attribute__((always_inline)) inline __m256i amax_block(const unsigned char* p, __m256i acc) {
  using W = Avx2Words;
  constexpr std::int64_t B = element_bytes<D>();
  const __m256i m0 = W::max(magnitude_bits<W>(load8<D>(p)), magnitude_bits<W>(load8<D>(p + 8 * B)));
  const __m256i m1 = W::max(magnitude_bits<W>(load8<D>(p + 16 * B)), magnitude_bits<W>(load8<D>(p + 24 * B)));
  return W::max(acc, W::max(m0, m1));
}

std::uint32_t horizontal_max(__m256i v) {
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  std::uint32_t best = 0;
  for (std::uint32_t x : lanes) best = x > best ? x : best;
  return best;
}

template <DType D>
std::uint32_t amax_span(const void* src, std::int64_t n) {
  constexpr std::int64_t B = element_bytes<D>();
  const auto* p = static_cast<const unsigned char*>(src);
  __m256i acc = _mm256_setzero_si256();
  std::int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) acc = amax_block<D>(p + i * B, acc);
  if (i < n) {
    // The tail goes through the same code from a zero-padded copy (zeros do not change an amax).
    alignas(32) unsigned char tail[kBlock * B] = {};
    __builtin_memcpy(tail, p + i * B, static_cast<std::size_t>((n - i) * B));
    acc = amax_block<D>(tail, acc);
  }
  return horizontal_max(acc);
}

template <Fp8Format Fmt, bool kAmax, DType D>
__attribute__((always_inline)) inline void cast_block(const unsigned char* p, __m256 scale, std::uint8_t* out,
                                                      __m256i& acc) {
  using W = Avx2Words;
  constexpr std::int64_t B = element_bytes<D>();
  const __m256i c0 = quantize_element<Fmt, kAmax, W>(load8<D>(p), scale, acc);
  const __m256i c1 = quantize_element<Fmt, kAmax, W>(load8<D>(p + 8 * B), scale, acc);
  const __m256i c2 = quantize_element<Fmt, kAmax, W>(load8<D>(p + 16 * B), scale, acc);
  const __m256i c3 = quantize_element<Fmt, kAmax, W>(load8<D>(p + 24 * B), scale, acc);
  store32(out, c0, c1, c2, c3);
}

template <Fp8Format Fmt, bool kAmax, DType D>
std::uint32_t cast_span(const void* src, std::int64_t n, float scale, std::uint8_t* out) {
  constexpr std::int64_t B = element_bytes<D>();
  const auto* p = static_cast<const unsigned char*>(src);
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256i acc = _mm256_setzero_si256();
  std::int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) cast_block<Fmt, kAmax, D>(p + i * B, vscale, out + i, acc);
  if (i < n) {
    alignas(32) unsigned char tail[kBlock * B] = {};
    alignas(32) std::uint8_t codes[kBlock];
    __builtin_memcpy(tail, p + i * B, static_cast<std::size_t>((n - i) * B));
    cast_block<Fmt, kAmax, D>(tail, vscale, codes, acc);
    __builtin_memcpy(out + i, codes, static_cast<std::size_t>(n - i));
  }
  return kAmax ? horizontal_max(acc) : 0u;
}

// Row-wise scales per column (AmaxColumnsSpan, CastColumnsSpan): eight columns at a time, the tail
// through the same code from zero-padded copies.
template <DType D>
void amax_columns_span(const void* src, std::int64_t n, std::uint32_t* acc) {
  using W = Avx2Words;
  constexpr std::int64_t B = element_bytes<D>();
  const auto* p = static_cast<const unsigned char*>(src);
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    auto* a = reinterpret_cast<__m256i*>(acc + j);
    _mm256_storeu_si256(a, W::max(_mm256_loadu_si256(a), magnitude_bits<W>(load8<D>(p + j * B))));
  }
  if (j < n) {
    alignas(32) unsigned char tail[8 * B] = {};
    alignas(32) std::uint32_t tail_acc[8] = {};
    __builtin_memcpy(tail, p + j * B, static_cast<std::size_t>((n - j) * B));
    __builtin_memcpy(tail_acc, acc + j, static_cast<std::size_t>(n - j) * 4);
    const __m256i m = W::max(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail_acc)),
                             magnitude_bits<W>(load8<D>(tail)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(tail_acc), m);
    __builtin_memcpy(acc + j, tail_acc, static_cast<std::size_t>(n - j) * 4);
  }
}

// Eight elements cast with eight scales; kNanScaleCode where the scale is NaN (Note [fp8 NaN scale]).
template <Fp8Format Fmt, DType D>
__attribute__((always_inline)) inline __m256i slice_codes8(const unsigned char* p, const float* scales) {
  using W = Avx2Words;
  __m256i unused = _mm256_setzero_si256();
  const __m256 s = _mm256_loadu_ps(scales);
  const __m256i code = quantize_element<Fmt, false, W>(load8<D>(p), s, unused);
  const __m256i nan_scale = W::gt(W::and_(W::bits(s), W::set(0x7fffffffu)), W::set(0x7f800000u));
  return W::select(nan_scale, W::set(kNanScaleCode), code);
}

template <Fp8Format Fmt, DType D>
void cast_columns_span(const void* src, std::int64_t n, const float* scales, std::uint8_t* out) {
  constexpr std::int64_t B = element_bytes<D>();
  const auto* p = static_cast<const unsigned char*>(src);
  std::int64_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    store32(out + j, slice_codes8<Fmt, D>(p + j * B, scales + j), slice_codes8<Fmt, D>(p + (j + 8) * B, scales + j + 8),
            slice_codes8<Fmt, D>(p + (j + 16) * B, scales + j + 16), slice_codes8<Fmt, D>(p + (j + 24) * B, scales + j + 24));
  }
  if (j < n) {
    alignas(32) unsigned char tail[kBlock * B] = {};
    alignas(32) float tail_scales[kBlock] = {};
    alignas(32) std::uint8_t codes[kBlock];
    __builtin_memcpy(tail, p + j * B, static_cast<std::size_t>((n - j) * B));
    __builtin_memcpy(tail_scales, scales + j, static_cast<std::size_t>(n - j) * 4);
    store32(codes, slice_codes8<Fmt, D>(tail, tail_scales), slice_codes8<Fmt, D>(tail + 8 * B, tail_scales + 8),
            slice_codes8<Fmt, D>(tail + 16 * B, tail_scales + 16), slice_codes8<Fmt, D>(tail + 24 * B, tail_scales + 24));
    __builtin_memcpy(out + j, codes, static_cast<std::size_t>(n - j));
  }
}

// No std:: templates here: an out-of-line copy compiled for AVX2 could be picked by the linker
// for the baseline path too (Note [always inline on the host] in hd.h).
template <Fp8Format Fmt, bool kAmax>
void fill_casts(CastSpan (&slot)[3]) {
  slot[0] = &cast_span<Fmt, kAmax, DType::Float32>;
  slot[1] = &cast_span<Fmt, kAmax, DType::Float16>;
  slot[2] = &cast_span<Fmt, kAmax, DType::BFloat16>;
}

}  // namespace

const Fp8SpanKernels& avx2_fp8_span_kernels() {
  static const Fp8SpanKernels kernels = [] {
    Fp8SpanKernels k{};
    k.amax[0] = &amax_span<DType::Float32>;
    k.amax[1] = &amax_span<DType::Float16>;
    k.amax[2] = &amax_span<DType::BFloat16>;
    fill_casts<Fp8Format::E4M3FN, false>(k.cast[0][0]);
    fill_casts<Fp8Format::E4M3FN, true>(k.cast[0][1]);
    fill_casts<Fp8Format::E5M2, false>(k.cast[1][0]);
    fill_casts<Fp8Format::E5M2, true>(k.cast[1][1]);
    k.amax_columns[0] = &amax_columns_span<DType::Float32>;
    k.amax_columns[1] = &amax_columns_span<DType::Float16>;
    k.amax_columns[2] = &amax_columns_span<DType::BFloat16>;
    k.cast_columns[0][0] = &cast_columns_span<Fp8Format::E4M3FN, DType::Float32>;
    k.cast_columns[0][1] = &cast_columns_span<Fp8Format::E4M3FN, DType::Float16>;
    k.cast_columns[0][2] = &cast_columns_span<Fp8Format::E4M3FN, DType::BFloat16>;
    k.cast_columns[1][0] = &cast_columns_span<Fp8Format::E5M2, DType::Float32>;
    k.cast_columns[1][1] = &cast_columns_span<Fp8Format::E5M2, DType::Float16>;
    k.cast_columns[1][2] = &cast_columns_span<Fp8Format::E5M2, DType::BFloat16>;
    return k;
  }();
  return kernels;
}

}  // namespace autocastgen::kernels::fp8::detail
