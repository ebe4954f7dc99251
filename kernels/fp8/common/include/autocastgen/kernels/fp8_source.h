// Host-side description of what the fp8 kernels read (pointer, size, dtype) and its validation.
#pragma once

#include <cstdint>
#include <string>

#include "autocastgen/kernels/grad_span.h"

namespace autocastgen::kernels::fp8 {

// `numel` dense elements of `dtype` (float32, bfloat16 or float16) from `data`. Strided tensors
// are the caller's business (the torch glue passes contiguous ones).
struct Fp8Source {
  const void* data = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::Float32;
};

// Which slices of a row-major rows x cols matrix get one row-wise scale each: every row (the amax
// over the columns, `rows` scales) or every column (the amax over the rows, `cols` scales).
enum class Fp8Slices : std::uint8_t { Rows, Columns };

// Throws std::invalid_argument (naming `who`) for another dtype, a negative numel, or a null or
// misaligned pointer with numel > 0.
inline void validate_fp8_source(const Fp8Source& src, const char* who) {
  const std::string prefix = std::string(who) + ": ";
  if (src.dtype != DType::Float32 && src.dtype != DType::Float16 && src.dtype != DType::BFloat16) {
    throw_invalid_argument(prefix + "the source must be float32, bfloat16 or float16, got " + dtype_name(src.dtype));
  }
  if (src.numel < 0) throw_invalid_argument(prefix + "negative numel (" + std::to_string(src.numel) + ")");
  if (src.numel == 0) return;
  if (src.data == nullptr) throw_invalid_argument(prefix + "numel > 0 and a null source pointer");
  if (reinterpret_cast<std::uintptr_t>(src.data) % dtype_size(src.dtype) != 0) {
    throw_invalid_argument(prefix + "the source is not aligned to its element size");
  }
}

}  // namespace autocastgen::kernels::fp8
