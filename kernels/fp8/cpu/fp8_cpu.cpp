// CPU fp8 kernels: argument checks, ISA dispatch, work split over the executor, baseline loops.
#include "autocastgen/kernels/fp8_cpu.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "fp8_span_kernels.h"

namespace autocastgen::kernels::fp8 {
namespace detail {
namespace {

// The baseline path: ScalarWords one element at a time, what the CUDA kernel runs per element.
template <DType D>
std::uint32_t amax_span_scalar(const void* src, std::int64_t n) {
  std::uint32_t acc = 0;
  for (std::int64_t i = 0; i < n; ++i) acc = ScalarWords::max(acc, magnitude_bits<ScalarWords>(widen_element<D>(src, i)));
  return acc;
}

template <Fp8Format Fmt, bool kAmax, DType D>
std::uint32_t cast_span_scalar(const void* src, std::int64_t n, float scale, std::uint8_t* out) {
  std::uint32_t acc = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint8_t>(quantize_element<Fmt, kAmax, ScalarWords>(widen_element<D>(src, i), scale, acc));
  }
  return acc;
}

template <DType D>
void amax_columns_scalar(const void* src, std::int64_t n, std::uint32_t* acc) {
  for (std::int64_t j = 0; j < n; ++j) acc[j] = ScalarWords::max(acc[j], magnitude_bits<ScalarWords>(widen_element<D>(src, j)));
}

template <Fp8Format Fmt, DType D>
void cast_columns_scalar(const void* src, std::int64_t n, const float* scales, std::uint8_t* out) {
  for (std::int64_t j = 0; j < n; ++j) out[j] = quantize_slice_element<Fmt>(widen_element<D>(src, j), scales[j]);
}

template <Fp8Format Fmt>
void fill_column_casts(CastColumnsSpan (&slot)[3]) {
  slot[0] = &cast_columns_scalar<Fmt, DType::Float32>;
  slot[1] = &cast_columns_scalar<Fmt, DType::Float16>;
  slot[2] = &cast_columns_scalar<Fmt, DType::BFloat16>;
}

template <Fp8Format Fmt, bool kAmax>
void fill_casts(CastSpan (&slot)[3]) {
  slot[0] = &cast_span_scalar<Fmt, kAmax, DType::Float32>;
  slot[1] = &cast_span_scalar<Fmt, kAmax, DType::Float16>;
  slot[2] = &cast_span_scalar<Fmt, kAmax, DType::BFloat16>;
}

}  // namespace

const Fp8SpanKernels& baseline_fp8_span_kernels() {
  static const Fp8SpanKernels kernels = [] {
    Fp8SpanKernels k{};
    k.amax[0] = &amax_span_scalar<DType::Float32>;
    k.amax[1] = &amax_span_scalar<DType::Float16>;
    k.amax[2] = &amax_span_scalar<DType::BFloat16>;
    fill_casts<Fp8Format::E4M3FN, false>(k.cast[0][0]);
    fill_casts<Fp8Format::E4M3FN, true>(k.cast[0][1]);
    fill_casts<Fp8Format::E5M2, false>(k.cast[1][0]);
    fill_casts<Fp8Format::E5M2, true>(k.cast[1][1]);
    k.amax_columns[0] = &amax_columns_scalar<DType::Float32>;
    k.amax_columns[1] = &amax_columns_scalar<DType::Float16>;
    k.amax_columns[2] = &amax_columns_scalar<DType::BFloat16>;
    fill_column_casts<Fp8Format::E4M3FN>(k.cast_columns[0]);
    fill_column_casts<Fp8Format::E5M2>(k.cast_columns[1]);
    return k;
  }();
  return kernels;
}

const Fp8SpanKernels& fp8_span_kernels_for(CpuIsa isa, const char* who) {
  if (isa == CpuIsa::Auto) isa = best_cpu_isa();
  if (isa == CpuIsa::Avx2) {
#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
    if (best_cpu_isa() == CpuIsa::Avx2) return avx2_fp8_span_kernels();
#endif
    throw_invalid_argument(std::string(who) + ": CpuIsa::Avx2 was requested but this CPU (or this build) has no AVX2+FMA+F16C");
  }
  return baseline_fp8_span_kernels();
}

}  // namespace detail

namespace {

using detail::fp8_span_kernels_for;

// Runs body(begin, end) over pieces of [0, n) on the executor's workers and returns the largest
// value a piece returned (amax bits; 0 when no piece records one).
template <class Body>
std::uint32_t run_pieces(std::int64_t n, const Fp8CpuOptions& options, const Body& body) {
  if (n == 0) return 0;
  const Executor& executor = options.executor != nullptr ? *options.executor : thread_executor();
  const std::int64_t pieces = (n + kFp8CpuPieceElements - 1) / kFp8CpuPieceElements;
  const std::int64_t workers = std::clamp<std::int64_t>(executor.workers_for(n), 1, pieces);
  std::atomic<std::int64_t> next_piece{0};
  std::vector<std::uint32_t> per_worker(static_cast<std::size_t>(workers), 0);
  // Dynamic pieces, as the scaler kernel does (Note [dynamic pieces] in scaler_cpu.cpp).
  executor.run(workers, [&](std::int64_t w) {
    std::uint32_t local = 0;
    for (std::int64_t p = next_piece.fetch_add(1, std::memory_order_relaxed); p < pieces;
         p = next_piece.fetch_add(1, std::memory_order_relaxed)) {
      const std::int64_t begin = p * kFp8CpuPieceElements;
      local = std::max(local, body(begin, std::min(n, begin + kFp8CpuPieceElements)));
    }
    per_worker[static_cast<std::size_t>(w)] = local;
  });
  return *std::max_element(per_worker.begin(), per_worker.end());
}

const unsigned char* element_ptr(const Fp8Source& src, std::int64_t i) {
  return static_cast<const unsigned char*>(src.data) + static_cast<std::size_t>(i) * dtype_size(src.dtype);
}

float cast_impl(const Fp8Source& src, float scale, Fp8Format format, std::uint8_t* out, bool record_amax,
                const Fp8CpuOptions& options, const char* who) {
  validate_fp8_source(src, who);
  if (src.numel > 0 && out == nullptr) throw_invalid_argument(std::string(who) + ": null output pointer");
  const detail::CastSpan span = fp8_span_kernels_for(options.isa, who)
                                    .cast[static_cast<int>(format)][record_amax ? 1 : 0][static_cast<int>(src.dtype)];
  const std::uint32_t bits = run_pieces(src.numel, options, [&](std::int64_t begin, std::int64_t end) {
    return span(element_ptr(src, begin), end - begin, scale, out + begin);
  });
  return float_of(bits);
}

}  // namespace

float amax_cpu(const Fp8Source& src, const Fp8CpuOptions& options) {
  static constexpr const char* kWho = "autocastgen::kernels::fp8::amax_cpu";
  validate_fp8_source(src, kWho);
  const detail::AmaxSpan span = fp8_span_kernels_for(options.isa, kWho).amax[static_cast<int>(src.dtype)];
  return float_of(run_pieces(src.numel, options, [&](std::int64_t begin, std::int64_t end) {
    return span(element_ptr(src, begin), end - begin);
  }));
}

void scale_cast_cpu(const Fp8Source& src, float scale, Fp8Format format, std::uint8_t* out,
                    const Fp8CpuOptions& options) {
  cast_impl(src, scale, format, out, false, options, "autocastgen::kernels::fp8::scale_cast_cpu");
}

float scale_cast_amax_cpu(const Fp8Source& src, float scale, Fp8Format format, std::uint8_t* out,
                          const Fp8CpuOptions& options) {
  return cast_impl(src, scale, format, out, true, options, "autocastgen::kernels::fp8::scale_cast_amax_cpu");
}

}  // namespace autocastgen::kernels::fp8
