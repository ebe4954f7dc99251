// Private interface between the CPU driver and its per-instruction-set span loops.
#pragma once

#include <cstdint>

namespace autocastgen::kernels::detail {

// Processes one dense span of `n` elements: unscales it in place by `inv` when `write`, otherwise
// only checks it. Returns true when any input element is inf or NaN.
using SpanKernel = bool (*)(void* data, std::int64_t n, float inv, bool write);

// One loop per DType, indexed by static_cast<int>(DType).
struct SpanKernels {
  SpanKernel by_dtype[4];
};

const SpanKernels& baseline_span_kernels();
#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
// Defined in scaler_cpu_avx2.cpp, the one file compiled with -mavx2 -mfma -mf16c; call only when
// the CPU has those features.
const SpanKernels& avx2_span_kernels();
#endif

}  // namespace autocastgen::kernels::detail
