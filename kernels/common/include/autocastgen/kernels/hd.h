// Portability layer for code compiled both by the host compiler and by nvcc (host+device).
#pragma once

#include <cstdint>

// Note [always inline on the host]
// On the host every shared element function is forced inline. The CPU kernel compiles one
// translation unit with AVX2 enabled; if one of these functions were emitted out of line there,
// the linker could pick that AVX2 copy for the baseline (SSE2) code path too, which would crash on
// CPUs without AVX2. Forcing inlining means no out-of-line copy exists to be picked.
#if defined(__CUDACC__)
#define AUTOCASTGEN_HD __host__ __device__ __forceinline__
#define AUTOCASTGEN_DEVICE_CODE_POSSIBLE 1
#else
#define AUTOCASTGEN_HD inline __attribute__((always_inline))
#define AUTOCASTGEN_DEVICE_CODE_POSSIBLE 0
#endif

namespace autocastgen::kernels {

AUTOCASTGEN_HD std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(std::uint32_t, x);
#endif
}

AUTOCASTGEN_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

AUTOCASTGEN_HD std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return __builtin_bit_cast(std::uint64_t, x);
#endif
}

}  // namespace autocastgen::kernels
