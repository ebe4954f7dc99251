// Per-dtype wrapper templates the importer refuses (Note [per-dtype wrapper templates]): a value
// the policy language cannot say (int8), and cast policies whose parameters name no dtype.
#include <ATen/core/Tensor.h>
#include <ATen/ops/conv2d_ops.h>
#include <ATen/ops/mm_ops.h>
#include <torch/library.h>

namespace vendor {

enum class QuantCastPolicy : uint8_t { user_defined_dtype, fp32, int8, fallthrough };

// One cast policy per dtype, named for it.
template <QuantCastPolicy bf16_policy, QuantCastPolicy fp16_policy, class Redispatch, Redispatch* F>
struct PerDtype {
  template <class... Args>
  static at::Tensor call(Args... args) {
    return (*F)(args...);
  }
};

// Two cast policies whose names say no dtype.
template <QuantCastPolicy first, QuantCastPolicy second, class Redispatch, Redispatch* F>
struct TwoPolicies {
  template <class... Args>
  static at::Tensor call(Args... args) {
    return (*F)(args...);
  }
};

}  // namespace vendor

TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) {
  m.impl("mm", &vendor::PerDtype<vendor::QuantCastPolicy::int8, vendor::QuantCastPolicy::fp32, decltype(at::_ops::mm::call),
                                 &at::_ops::mm::call>::call<const at::Tensor&, const at::Tensor&>);
  m.impl("conv2d", &vendor::TwoPolicies<vendor::QuantCastPolicy::user_defined_dtype, vendor::QuantCastPolicy::fp32,
                                        decltype(at::_ops::conv2d::call), &at::_ops::conv2d::call>::call<
                       const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::SymIntArrayRef,
                       c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymInt>);
}
