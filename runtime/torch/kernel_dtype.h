// The kernel library's name for a tensor's dtype (internal): the scaler and fp8 glue share it.
#pragma once

#include <optional>

#include <c10/core/ScalarType.h>

#include "autocastgen/kernels/scaler_element.h"

namespace autocastgen {

// nullopt for a dtype the kernels do not take; each caller says what it accepts.
inline std::optional<kernels::DType> kernel_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return kernels::DType::Float32;
    case c10::ScalarType::Half: return kernels::DType::Float16;
    case c10::ScalarType::BFloat16: return kernels::DType::BFloat16;
    case c10::ScalarType::Double: return kernels::DType::Float64;
    default: return std::nullopt;
  }
}

}  // namespace autocastgen
