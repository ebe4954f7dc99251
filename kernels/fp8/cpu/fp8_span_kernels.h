// Private interface between the CPU fp8 driver and its per-instruction-set span loops.
#pragma once

#include <cstdint>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/scaler_cpu.h"

namespace autocastgen::kernels::fp8::detail {

// The amax of n elements, as magnitude bits (Note [amax] in fp8_element.h).
using AmaxSpan = std::uint32_t (*)(const void* src, std::int64_t n);
// Casts n elements with `scale` into n bytes at `out`; returns the amax bits of the input when the
// loop records it, else 0.
using CastSpan = std::uint32_t (*)(const void* src, std::int64_t n, float scale, std::uint8_t* out);

// Row-wise scales per column (fp8_cpu_rowwise.cpp), over n elements of one row: acc[j] takes the
// max of itself and element j's magnitude bits; out[j] is element j cast with scales[j]
// (quantize_slice_element: kNanScaleCode for a NaN scale, Note [fp8 NaN scale]).
using AmaxColumnsSpan = void (*)(const void* src, std::int64_t n, std::uint32_t* acc);
using CastColumnsSpan = void (*)(const void* src, std::int64_t n, const float* scales, std::uint8_t* out);

// Indexed by static_cast<int>(DType) for Float32, Float16 and BFloat16 (Float64 is refused before),
// and for the casts by [format][records amax] (the column casts by [format]).
struct Fp8SpanKernels {
  AmaxSpan amax[3];
  CastSpan cast[2][2][3];
  AmaxColumnsSpan amax_columns[3];
  CastColumnsSpan cast_columns[2][3];
};

const Fp8SpanKernels& baseline_fp8_span_kernels();
// The span loops for `isa` (Auto: the best this CPU runs); throws for Avx2 on a CPU without it.
const Fp8SpanKernels& fp8_span_kernels_for(CpuIsa isa, const char* who);
#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
// Defined in fp8_cpu_avx2.cpp, compiled with -mavx2 -mfma -mf16c; call only when the CPU has them.
const Fp8SpanKernels& avx2_fp8_span_kernels();
#endif

}  // namespace autocastgen::kernels::fp8::detail
