// CUDA fp8 quantisation kernels: host entry points (no CUDA headers needed to include this).
#pragma once

#include <cstdint>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/fp8_source.h"

namespace autocastgen::kernels::fp8::cuda {

// Every pointer is a device pointer on the current device; `stream` is a cudaStream_t (nullptr:
// the legacy default stream). All calls are asynchronous (no host sync) and throw
// std::invalid_argument for malformed arguments, std::runtime_error for a failed launch.
// Scalars (amax, scale) stay in device memory so that a training step never waits for the GPU.

// *amax_out = max |x| over the source, NaN-propagating (Note [amax] in fp8_element.h); 0 when
// empty. The float is cleared on the stream first, then blocks combine with an integer atomicMax.
void amax(const Fp8Source& src, float* amax_out, void* stream);

// out[i] = fp8 code of x[i] * (*scale), saturated (Note [fp8 cast]). With amax_out != nullptr the
// same pass also writes the source's amax there (delayed scaling's one-pass kernel).
void scale_cast(const Fp8Source& src, const float* scale, Fp8Format format, std::uint8_t* out,
                float* amax_out, void* stream);

// One thread: *scale = scale_from_amax(*amax, fp8_max, margin, 1) and *inv_scale = 1 / *scale
// (current scaling, Note [fp8 scale] in fp8_scale.h).
void scale_from_amax(const float* amax, float fp8_max, std::int32_t margin, float* scale, float* inv_scale,
                     void* stream);

// One thread, after scale_cast(..., amax_out = amax) with *scale: *pass_inv_scale gets the
// dequantisation factor of that cast (dequant_scale_for_pass), amax_ring[next] gets *amax, and
// *scale becomes the scale of the next cast (Note [delayed scaling]). `count` is the number of
// amaxes recorded before this one; the caller advances next and count.
void delayed_update(float* amax_ring, std::int32_t length, std::int32_t next, std::int32_t count,
                    const float* amax, float* scale, float* pass_inv_scale, float fp8_max, std::int32_t margin,
                    void* stream);

// Row-wise scales, as rowwise_cast_cpu in fp8_cpu.h (the same bits; Note [fp8 rowwise kernels] in
// fp8_cuda.cu): out gets rows * cols codes, inv_scales one float per slice. For Fp8Slices::Columns
// `workspace` holds cols floats (the column amaxes, then the scales); for Rows it may be null.
void rowwise_cast(const Fp8Source& src, std::int64_t rows, std::int64_t cols, Fp8Slices slices, Fp8Format format,
                  std::int32_t margin, std::uint8_t* out, float* inv_scales, float* workspace, void* stream);

// dst[j * rows + i] = src[i * cols + j]: the transpose of a row-major rows x cols matrix of bytes
// (fp8 codes), row-major cols x rows. Both dimensions must be multiples of 4 and both pointers
// 4-byte aligned (fp8 GEMM operands: dimensions multiples of 16). The fp8 GEMM needs its left
// operand row-major and its right one column-major, so a backward GEMM transposes fp8 copies; a
// generic strided copy moves single bytes with uncoalesced accesses, this one 4-byte words
// through a shared-memory tile (Note [byte transpose] in fp8_cuda.cu).
void transpose_bytes(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows, std::int64_t cols,
                     void* stream);

}  // namespace autocastgen::kernels::fp8::cuda
