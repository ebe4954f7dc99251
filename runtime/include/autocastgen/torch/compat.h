// The PyTorch C++ API differences between the releases autocastgen builds against (2.4-2.15), in
// one place (docs/releases.md, "What differs between releases").
#pragma once

#include <optional>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/version.h>

namespace autocastgen::torch::compat {

// at::_scaled_mm: 2.4 takes the scales as optional keywords after the bias and returns the output
// with an amax; 2.5 and later take them positionally and return the output alone.
inline at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                            const at::Tensor& scale_b, const std::optional<at::Tensor>& bias,
                            std::optional<at::ScalarType> out_dtype, bool use_fast_accum) {
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 5
  return std::get<0>(at::_scaled_mm(a, b, bias, out_dtype, scale_a, scale_b, std::nullopt, use_fast_accum));
#else
  return at::_scaled_mm(a, b, scale_a, scale_b, bias, std::nullopt, out_dtype, use_fast_accum);
#endif
}

}  // namespace autocastgen::torch::compat
