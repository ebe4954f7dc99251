// CPU fp8 quantisation kernels: amax, fused scale + saturating cast, and both in one pass.
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

// Elements per piece the CPU workers take one at a time.
inline constexpr std::int64_t kFp8CpuPieceElements = 65536;

}  // namespace autocastgen::kernels::fp8
