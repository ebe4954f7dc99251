// CUDA grad-scaler kernels: host entry points (no CUDA headers needed to include this).
#pragma once

#include <cstdint>
#include <span>

#include "autocastgen/kernels/grad_span.h"
#include "autocastgen/kernels/scaler_update.h"

namespace autocastgen::kernels::cuda {

// Elements per CUDA block (chunk); chunks carried by one launch's kernel parameters, and the
// most that still go through the small (4 KB) parameter block (Note [parameter blocks]).
inline constexpr std::int64_t kChunkElements = 65536;
std::size_t max_chunks_per_launch();
std::size_t small_launch_chunks();

// The CUDA counterpart of non_finite_check_and_unscale_cpu: every gradient is unscaled in place
// by *inv_scale and *found_inf is set to 1.0f when any input element is inf or NaN. All pointers
// are device pointers on the current device; `stream` is a cudaStream_t (nullptr: the legacy
// default stream). Asynchronous: returns after queueing the launches, without a host sync.
// Throws std::invalid_argument for a malformed list, std::runtime_error for a launch failure.
void non_finite_check_and_unscale(std::span<const GradSpan> grads, float* found_inf,
                                  const float* inv_scale, void* stream);

// One step of the update rule on device memory, as a single-thread kernel (no host sync).
// hysteresis_left may be null.
void update_scale(float* scale, std::int32_t* growth_tracker, std::int32_t* hysteresis_left,
                  const float* found_inf, const ScaleUpdateConfig& config, void* stream);

}  // namespace autocastgen::kernels::cuda
