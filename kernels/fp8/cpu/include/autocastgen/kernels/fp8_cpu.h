// CPU fp8 quantisation kernels: amax, fused scale + saturating cast, both in one pass, and row-wise scales.
#pragma once

#include <cstdint>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/fp8_source.h"
#include "autocastgen/kernels/scaler_cpu.h"

namespace autocastgen::kernels::fp8 {

struct Fp8CpuOptions {
  CpuIsa isa = CpuIsa::Auto;           // the scaler kernels' ISA choice (scaler_cpu.h)
  const Executor* executor = nullptr;  // nullptr: thread_executor()
};

// max |x| over the source, NaN if any element is NaN (Note [amax] in fp8_element.h); 0 for an
// empty source.
float amax_cpu(const Fp8Source& src, const Fp8CpuOptions& options = {});

// out[i] = fp8 code of (float(x[i]) * scale) saturated to the format's range (Note [fp8 cast]);
// `out` holds numel bytes. Returns nothing: the current-scaling cast pass.
void scale_cast_cpu(const Fp8Source& src, float scale, Fp8Format format, std::uint8_t* out,
                    const Fp8CpuOptions& options = {});

// The same cast, and the amax of the source measured in the same pass (delayed scaling's kernel,
// Note [delayed scaling] in fp8_scale.h). Returns that amax.
float scale_cast_amax_cpu(const Fp8Source& src, float scale, Fp8Format format, std::uint8_t* out,
                          const Fp8CpuOptions& options = {});

// Row-wise scales (Note [fp8 power-of-two scale] in fp8_scale.h): a row-major rows x cols matrix
// (src.numel == rows * cols) with one power-of-two scale per slice (Fp8Slices in fp8_source.h):
// out gets rows * cols codes of x * scale saturated (Note [fp8 cast]), inv_scales one 1/scale per
// slice (NaN for a slice holding a NaN or an infinity; 1 for an all-zero one). Rows run the span
// loops above row by row; columns go in blocks of 128, each a pass over all rows for the amax and
// one for the cast (per-column span loops, AVX2 where the CPU has it).
void rowwise_cast_cpu(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices,
                      Fp8Format format, std::int32_t margin, std::uint8_t* out, float* inv_scales,
                      const Fp8CpuOptions& options = {});

// Elements per piece the CPU workers take one at a time.
inline constexpr std::int64_t kFp8CpuPieceElements = 65536;

}  // namespace autocastgen::kernels::fp8
