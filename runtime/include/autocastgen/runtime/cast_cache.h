// Casts through autocastgen's thread-local cast cache (Note [cast cache] in cast_cache.cpp;
// docs/runtime.md explains why it is per thread rather than shared behind a lock).
#pragma once

#include <cstddef>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace autocastgen {

// `tensor` cast to `to` when it is eligible (Note [eligible argument], autocastgen/torch/policy_call.h), else
// `tensor` itself. A float32 leaf that requires
// grad (a weight) cast to this thread's lower-precision dtype for `device` is cached while the
// device's outermost AutocastScope lasts (not in inference mode, not with the cache disabled).
[[nodiscard]] TORCH_API at::Tensor cached_cast(c10::ScalarType to, const at::Tensor& tensor, c10::DeviceType device);

// This thread's cache for `device`: entries held (live and not yet swept), and dropping them all.
[[nodiscard]] TORCH_API size_t cast_cache_size(c10::DeviceType device);
TORCH_API void clear_cast_cache(c10::DeviceType device);

}  // namespace autocastgen
