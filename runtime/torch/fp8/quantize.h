// fp8 quantisation of tensors (internal): current and delayed scaling over per-device primitives.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "autocastgen/kernels/fp8_element.h"
#include "autocastgen/kernels/fp8_source.h"

namespace autocastgen::fp8::detail {

// A tensor in fp8: data has the source's shape (contiguous); the GEMM multiplies by inv_scale,
// a 0-dim float32 tensor on the data's device (1/scale, or NaN for a non-finite source).
// The kernels' view of a contiguous float32/bfloat16/float16 tensor; other dtypes are refused.
kernels::fp8::Fp8Source source_of(const at::Tensor& x);

struct Quantized {
  at::Tensor data;
  at::Tensor inv_scale;
};

// Delayed scaling's per-tensor state (Note [delayed scaling] in fp8_scale.h), on the tensor's
// device; `next` and `casts` are host integers so that no step reads device memory.
struct DelayedState {
  at::Tensor amax_ring;  // float32 [length]
  at::Tensor scale;      // float32 0-dim: the scale of the next cast
  std::int32_t length = 0;
  std::int32_t margin = 0;
  std::int32_t next = 0;
  std::int64_t casts = 0;
};

// The device primitives. Every scalar (amax, scale) stays in a 0-dim float32 tensor on the
// tensor's device, so on CUDA nothing waits for the GPU. Sources are contiguous float32,
// bfloat16 or float16 tensors.
class Primitives {
 public:
  virtual ~Primitives() = default;
  // max |x|, NaN-propagating (Note [amax]).
  [[nodiscard]] virtual at::Tensor amax(const at::Tensor& x) const = 0;
  // scale = scale_from_amax(amax, fp8_max, margin, fallback 1) and inv = 1 / scale, written into
  // the two 0-dim tensors.
  virtual void scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin, at::Tensor& scale,
                               at::Tensor& inv_scale) const = 0;
  // The saturating cast of x * scale; with amax_out, the amax of x from the same pass.
  [[nodiscard]] virtual at::Tensor cast(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType fp8,
                                        at::Tensor* amax_out) const = 0;
  // After a cast with state.scale that measured `amax`: pass_inv_scale = the cast's
  // dequantisation factor, amax recorded at state.next, state.scale = the next cast's scale.
  // The caller advances next and casts.
  virtual void delayed_update(DelayedState& state, const at::Tensor& amax, float fp8_max,
                              at::Tensor& pass_inv_scale) const = 0;
  // rows.t().contiguous() for a row-major 2-D fp8 tensor, where the device has a kernel for it
  // that beats PyTorch's strided copy (CUDA: Note [byte transpose] in kernels/fp8/cuda); nullopt
  // elsewhere, and the caller copies.
  [[nodiscard]] virtual std::optional<at::Tensor> transpose(const at::Tensor& /*rows*/) const { return std::nullopt; }
  // Row-wise scales (Note [fp8 rowwise] in rowwise.cpp) in one fused kernel: x 2-D, the amax over
  // reduced_dim (1: one scale per row, 0: one per column), data in x's shape and the inverse
  // scales float32 in x's shape with reduced_dim 1 (rowwise_buffers), the bits of
  // quantize_rows_with_ops. nullopt where the device has no such kernel (the ATen primitives).
  [[nodiscard]] virtual std::optional<Quantized> rowwise_cast(const at::Tensor& /*x*/, std::int64_t /*reduced_dim*/,
                                                              c10::ScalarType /*fp8*/, std::int32_t /*margin*/) const {
    return std::nullopt;
  }
};

// The uninitialised outputs of Primitives::rowwise_cast for x (2-D) on x's device.
[[nodiscard]] Quantized rowwise_buffers(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8);

// Note [unfused reference] in quantize.cpp: the scale rule (kernels::fp8::scale_from_amax) as
// PyTorch ops on a float32 amax tensor of any shape, elementwise; and the row-wise rule built on it
// (kernels::fp8::power_of_two_scale, Note [fp8 power-of-two scale]): the same two steps.
[[nodiscard]] at::Tensor aten_scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin,
                                              const at::Tensor& fallback);
[[nodiscard]] at::Tensor aten_power_of_two_scale(const at::Tensor& amax, float fp8_max, std::int32_t margin);

// The fused kernels for a device type (CPU always; CUDA when this library was built with the
// CUDA kernels), or the unfused ATen ops (`fused` false, or a device without fused kernels).
[[nodiscard]] const Primitives& primitives_for(c10::DeviceType device, bool fused);
[[nodiscard]] bool has_fused_primitives(c10::DeviceType device);
// Called once at load time by the CUDA glue.
void register_fused_primitives(c10::DeviceType device, const Primitives* primitives);

[[nodiscard]] kernels::fp8::Fp8Format format_of(c10::ScalarType fp8);

// A 0-dim float32 tensor on x's device, uninitialised: where a scale or amax is written.
[[nodiscard]] inline at::Tensor scalar_like(const at::Tensor& x) { return at::empty({}, x.options().dtype(at::kFloat)); }

// Current scaling: an amax pass, the scale, a cast pass.
[[nodiscard]] Quantized quantize_current(const Primitives& p, const at::Tensor& x, c10::ScalarType fp8,
                                         std::int32_t margin);
// Delayed scaling: one pass that casts with the state's scale and records the amax; the very
// first cast of a tensor has no history and is current-scaled (its amax starts the history).
[[nodiscard]] Quantized quantize_delayed(const Primitives& p, const at::Tensor& x, c10::ScalarType fp8,
                                         DelayedState& state);

}  // namespace autocastgen::fp8::detail
