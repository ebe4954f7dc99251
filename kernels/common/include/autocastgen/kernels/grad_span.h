// Host-side description of a gradient list (raw pointers, sizes, dtypes) and its validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>

#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen::kernels {

// Where an invalid argument was passed: std::source_location, or where the standard library does
// not offer it to this compiler (clang-14 with libstdc++ 12: the fuzz preset), the builtins that
// give the same file and line.
#if defined(__cpp_lib_source_location)
using CallSite = std::source_location;
#else
class CallSite {
 public:
  static constexpr CallSite current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    return CallSite(file, line);
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  constexpr CallSite(const char* file, unsigned line) noexcept : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};
#endif

// One dense gradient: `numel` elements of `dtype` stored contiguously from `data`. Strided views
// are the caller's business (the torch glue unscales a dense copy and copies it back).
struct GradSpan {
  void* data = nullptr;
  std::int64_t numel = 0;
  DType dtype = DType::Float32;
};

constexpr std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::Float32: return 4;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Float64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
  }
  return "unknown";
}

// Thrown for invalid arguments; the message names the kernel entry point and the C++ location.
[[noreturn]] inline void throw_invalid_argument(
    const std::string& message, CallSite where = CallSite::current()) {
  throw std::invalid_argument(message + " [" + where.file_name() + ":" +
                              std::to_string(where.line()) + "]");
}

// Builds the message for the first invalid span and throws it; only called once a span failed.
[[noreturn]] void throw_invalid_grad_span(std::span<const GradSpan> grads, std::size_t index,
                                          const char* who, CallSite where);

// Checks every span: known dtype, numel >= 0, non-null and element-aligned data when numel > 0.
// Note [cheap validation]: this runs on every call over every gradient (a thousand of them is
// common), so the loop only tests; the message is built after a test failed.
inline void validate_grad_spans(std::span<const GradSpan> grads, const char* who,
                                CallSite where = CallSite::current()) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const GradSpan& g = grads[i];
    const std::size_t size = dtype_size(g.dtype);
    const bool ok = size != 0 && g.numel >= 0 &&
                    (g.numel == 0 ||
                     (g.data != nullptr && reinterpret_cast<std::uintptr_t>(g.data) % size == 0));
    if (!ok) [[unlikely]] throw_invalid_grad_span(grads, i, who, where);
  }
}

// True when two non-empty spans share a byte. The kernels then process the list in order, one
// gradient after the other, so that a gradient listed twice is unscaled twice, as PyTorch's
// sequential CPU loop does, instead of racing with itself.
bool grad_spans_overlap(std::span<const GradSpan> grads);

}  // namespace autocastgen::kernels
