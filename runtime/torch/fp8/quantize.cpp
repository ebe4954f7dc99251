// fp8 quantisation: the CPU kernels and the unfused ATen ops as primitives, and the two scalings.
#include "quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include "autocastgen/kernels/fp8_cpu.h"
#include "autocastgen/kernels/fp8_scale.h"
#include "../kernel_dtype.h"
#include "../device_types.h"

namespace autocastgen::fp8::detail {

kernels::fp8::Fp8Source source_of(const at::Tensor& x) {
  TORCH_INTERNAL_ASSERT(x.is_contiguous(), "autocastgen fp8: the quantiser takes contiguous tensors");
  const c10::ScalarType t = x.scalar_type();
  const std::optional<kernels::DType> dtype = kernel_dtype(t);
  TORCH_CHECK(dtype && *dtype != kernels::DType::Float64, "autocastgen fp8: cannot quantise a ", t,
              " tensor (float32, bfloat16 or float16 only)");
  return {x.const_data_ptr(), x.numel(), *dtype};
}

namespace {

namespace k8 = kernels::fp8;

float host_float(const at::Tensor& t) { return *t.const_data_ptr<float>(); }

// The kernels' workers on PyTorch's intra-op pool (torch.set_num_threads is honoured; inside a
// parallel region everything runs on the calling thread). Same policy as the scaler ops'
// executor in scaler_ops.cpp.
class AtenExecutor final : public kernels::Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    if (at::in_parallel_region()) return 1;
    const std::int64_t useful = (elements + k8::kFp8CpuPieceElements - 1) / k8::kFp8CpuPieceElements;
    return std::clamp<std::int64_t>(useful, 1, at::get_num_threads());
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t w = begin; w < end; ++w) body(w);
    });
  }
};

k8::Fp8CpuOptions cpu_options() {
  static const AtenExecutor executor;
  return {kernels::CpuIsa::Auto, &executor};
}

// The fused CPU kernels (kernels/fp8/cpu); scalars live in CPU tensors and are read directly.
class CpuPrimitives final : public Primitives {
 public:
  at::Tensor amax(const at::Tensor& x) const override {
    return at::scalar_tensor(k8::amax_cpu(source_of(x), cpu_options()), at::TensorOptions().dtype(at::kFloat));
  }
  void scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin, at::Tensor& scale,
                       at::Tensor& inv_scale) const override {
    const float s = k8::scale_from_amax(host_float(amax), fp8_max, margin, 1.0f);
    *scale.mutable_data_ptr<float>() = s;
    *inv_scale.mutable_data_ptr<float>() = k8::inverse_scale(s);
  }
  at::Tensor cast(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType fp8,
                  at::Tensor* amax_out) const override {
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(fp8));
    auto* codes = static_cast<std::uint8_t*>(out.mutable_data_ptr());
    if (amax_out != nullptr) {
      const float a = k8::scale_cast_amax_cpu(source_of(x), host_float(scale), format_of(fp8), codes, cpu_options());
      *amax_out = at::scalar_tensor(a, at::TensorOptions().dtype(at::kFloat));
    } else {
      k8::scale_cast_cpu(source_of(x), host_float(scale), format_of(fp8), codes, cpu_options());
    }
    return out;
  }
  std::optional<Quantized> rowwise_cast(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8,
                                       std::int32_t margin) const override {
    Quantized q = rowwise_buffers(x, reduced_dim, fp8);
    const k8::Fp8Slices slices = reduced_dim == 1 ? k8::Fp8Slices::Rows : k8::Fp8Slices::Columns;
    k8::rowwise_cast_cpu(source_of(x), x.size(0), x.size(1), slices, format_of(fp8), margin,
                         static_cast<std::uint8_t*>(q.data.mutable_data_ptr()), q.inv_scale.mutable_data_ptr<float>(),
                         cpu_options());
    return q;
  }
  void delayed_update(DelayedState& state, const at::Tensor& amax, float fp8_max,
                      at::Tensor& pass_inv_scale) const override {
    const float used = host_float(state.scale);
    const float a = host_float(amax);
    const auto count = static_cast<std::int32_t>(std::min<std::int64_t>(state.casts, state.length));
    *pass_inv_scale.mutable_data_ptr<float>() = k8::dequant_scale_for_pass(used, a);
    *state.scale.mutable_data_ptr<float>() = k8::delayed_record_and_rescale(
        state.amax_ring.mutable_data_ptr<float>(), state.length, state.next, count, a, used, fp8_max, state.margin);
  }
};

// Note [unfused reference]
// The same primitives as separate ATen ops: `x.abs().amax()`, the scale rule as tensor
// arithmetic (in double, like k8::scale_from_amax), `(x.float() * scale).clamp(-max, max).to(fp8)`.
// They work on any device without a sync, are what one would write without our kernels, and give
// the same bits as the fused kernels (tests/fp8 checks that on CPU): the benchmark's unfused
// baseline and the tests' reference.
class AtenPrimitives final : public Primitives {
 public:
  at::Tensor amax(const at::Tensor& x) const override { return x.abs().amax().to(at::kFloat); }
  void scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin, at::Tensor& scale,
                       at::Tensor& inv_scale) const override {
    scale.copy_(aten_scale_from_amax(amax, fp8_max, margin, at::ones({}, amax.options().dtype(at::kFloat))));
    inv_scale.copy_(scale.reciprocal());
  }
  at::Tensor cast(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType fp8,
                  at::Tensor* amax_out) const override {
    const double max = k8::fp8_max(format_of(fp8));
    if (amax_out != nullptr) *amax_out = amax(x);
    return (x.to(at::kFloat) * scale).clamp(-max, max).to(fp8);
  }
  void delayed_update(DelayedState& state, const at::Tensor& amax, float fp8_max,
                      at::Tensor& pass_inv_scale) const override {
    const at::Tensor used = state.scale.clone();
    pass_inv_scale.copy_(at::where(at::isfinite(amax), used.reciprocal(), std::numeric_limits<float>::quiet_NaN()));
    state.amax_ring.select(0, state.next).copy_(amax);
    const std::int64_t filled = std::min<std::int64_t>(state.casts + 1, state.length);
    const at::Tensor window = state.amax_ring.narrow(0, 0, filled);
    const at::Tensor largest = at::where(at::isfinite(window), window, 0.0f).amax();
    const at::Tensor fallback = at::where(at::isfinite(used), used, 1.0f);
    state.scale.copy_(aten_scale_from_amax(largest, fp8_max, state.margin, fallback));
  }
};


std::array<const Primitives*, kDeviceTypes>& fused_registry() {
  static std::array<const Primitives*, kDeviceTypes> registry = [] {
    std::array<const Primitives*, kDeviceTypes> r{};
    static const CpuPrimitives cpu;
    r[static_cast<std::size_t>(c10::DeviceType::CPU)] = &cpu;
    return r;
  }();
  return registry;
}

}  // namespace

// Note [unfused reference]: the scale rule in double, like k8::scale_from_amax.
at::Tensor aten_scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin, const at::Tensor& fallback) {
  const at::Tensor a = amax.to(at::kDouble);
  at::Tensor s = at::div(at::scalar_tensor(static_cast<double>(fp8_max), a.options()), a);
  if (margin > 0) s = s.mul(std::ldexp(1.0, -margin));
  s = s.clamp_max(static_cast<double>(k8::kMaxScale)).to(at::kFloat);
  s = at::where(a > 0, s, fallback.to(at::kFloat));
  return at::where(at::isfinite(a), s, std::numeric_limits<float>::quiet_NaN());
}

// k8::power_of_two_scale step by step: scale_from_amax (fallback 1), then round_down_to_power_of_two
// (a finite scale's exponent bits; NaN kept).
at::Tensor aten_power_of_two_scale(const at::Tensor& amax, float fp8_max, std::int32_t margin) {
  const at::Tensor s = aten_scale_from_amax(amax, fp8_max, margin, at::ones({}, amax.options().dtype(at::kFloat)));
  const at::Tensor pow2 = at::bitwise_and(s.view(at::kInt), static_cast<std::int64_t>(0x7f800000)).view(at::kFloat);
  return at::where(at::isfinite(s), pow2, s);
}

Quantized rowwise_buffers(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8) {
  TORCH_INTERNAL_ASSERT(x.dim() == 2 && (reduced_dim == 0 || reduced_dim == 1));
  std::vector<std::int64_t> inv_sizes = x.sizes().vec();
  inv_sizes[static_cast<std::size_t>(reduced_dim)] = 1;
  return {at::empty(x.sizes(), x.options().dtype(fp8)), at::empty(inv_sizes, x.options().dtype(at::kFloat))};
}

k8::Fp8Format format_of(c10::ScalarType fp8) {
  if (fp8 == c10::ScalarType::Float8_e4m3fn) return k8::Fp8Format::E4M3FN;
  TORCH_CHECK(fp8 == c10::ScalarType::Float8_e5m2, "autocastgen fp8: ", fp8, " is not float8_e4m3fn or float8_e5m2");
  return k8::Fp8Format::E5M2;
}

const Primitives& primitives_for(c10::DeviceType device, bool fused) {
  if (!fused) {
    static const AtenPrimitives aten;
    return aten;
  }
  const Primitives* p = fused_registry().at(static_cast<std::size_t>(device));
  return p != nullptr ? *p : primitives_for(device, false);
}

bool has_fused_primitives(c10::DeviceType device) {
  return fused_registry().at(static_cast<std::size_t>(device)) != nullptr;
}

void register_fused_primitives(c10::DeviceType device, const Primitives* primitives) {
  fused_registry().at(static_cast<std::size_t>(device)) = primitives;
}

Quantized quantize_current(const Primitives& p, const at::Tensor& x, c10::ScalarType fp8, std::int32_t margin) {
  at::Tensor scale = scalar_like(x);
  at::Tensor inv = scalar_like(x);
  p.scale_from_amax(p.amax(x), k8::fp8_max(format_of(fp8)), margin, scale, inv);
  return {p.cast(x, scale, fp8, nullptr), inv};
}

Quantized quantize_delayed(const Primitives& p, const at::Tensor& x, c10::ScalarType fp8, DelayedState& state) {
  const float max = k8::fp8_max(format_of(fp8));
  if (state.casts == 0) {
    // No history yet: this cast is current-scaled, so the first step is not cast with scale 1.
    at::Tensor unused_inv = scalar_like(x);
    p.scale_from_amax(p.amax(x), max, state.margin, state.scale, unused_inv);
  }
  at::Tensor amax;
  at::Tensor data = p.cast(x, state.scale, fp8, &amax);
  at::Tensor inv = scalar_like(x);
  p.delayed_update(state, amax, max, inv);
  state.next = (state.next + 1) % state.length;
  ++state.casts;
  return {std::move(data), std::move(inv)};
}

}  // namespace autocastgen::fp8::detail
