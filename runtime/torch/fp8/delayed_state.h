// Delayed scaling's per-weight state, process-wide (internal; Note [delayed scaling state]).
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include "quantize.h"

namespace autocastgen::fp8::detail {

// Runs `cast` with the state of (`weight`, `fp8`) under that state's lock, creating the state on
// first use, restarting it when the recipe's history length or margin changed, and moving it when
// the weight moved to another device.
[[nodiscard]] Quantized with_delayed_state(const at::Tensor& weight, c10::ScalarType fp8, std::int32_t history_len,
                                           std::int32_t margin, const std::function<Quantized(DelayedState&)>& cast);

}  // namespace autocastgen::fp8::detail
