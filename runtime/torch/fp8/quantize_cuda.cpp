// The fused CUDA fp8 kernels as the CUDA quantisation primitives, registered when the library loads.
#include <string>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "autocastgen/fp8/select.h"
#include "autocastgen/kernels/fp8_cuda.h"
#include "quantize.h"

namespace autocastgen::fp8::detail {
namespace {

namespace k8 = kernels::fp8;

void* stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// Everything on PyTorch's current stream of the tensor's device; scalars stay on the device, so
// no call waits for the GPU.
class CudaPrimitives final : public Primitives {
 public:
  at::Tensor amax(const at::Tensor& x) const override {
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty({}, x.options().dtype(at::kFloat));
    k8::cuda::amax(source_of(x), out.mutable_data_ptr<float>(), stream());
    return out;
  }
  void scale_from_amax(const at::Tensor& amax, float fp8_max, std::int32_t margin, at::Tensor& scale,
                       at::Tensor& inv_scale) const override {
    const c10::cuda::CUDAGuard guard(amax.device());
    k8::cuda::scale_from_amax(amax.const_data_ptr<float>(), fp8_max, margin, scale.mutable_data_ptr<float>(),
                              inv_scale.mutable_data_ptr<float>(), stream());
  }
  at::Tensor cast(const at::Tensor& x, const at::Tensor& scale, c10::ScalarType fp8,
                  at::Tensor* amax_out) const override {
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(fp8));
    float* amax_ptr = nullptr;
    if (amax_out != nullptr) {
      *amax_out = at::empty({}, x.options().dtype(at::kFloat));
      amax_ptr = amax_out->mutable_data_ptr<float>();
    }
    k8::cuda::scale_cast(source_of(x), scale.const_data_ptr<float>(), format_of(fp8),
                         static_cast<std::uint8_t*>(out.mutable_data_ptr()), amax_ptr, stream());
    return out;
  }
  void delayed_update(DelayedState& state, const at::Tensor& amax, float fp8_max,
                      at::Tensor& pass_inv_scale) const override {
    const c10::cuda::CUDAGuard guard(amax.device());
    const auto count = static_cast<std::int32_t>(std::min<std::int64_t>(state.casts, state.length));
    k8::cuda::delayed_update(state.amax_ring.mutable_data_ptr<float>(), state.length, state.next, count,
                             amax.const_data_ptr<float>(), state.scale.mutable_data_ptr<float>(),
                             pass_inv_scale.mutable_data_ptr<float>(), fp8_max, state.margin, stream());
  }
  std::optional<at::Tensor> transpose(const at::Tensor& rows) const override {
    const auto aligned = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 3u) == 0; };
    if (rows.dim() != 2 || rows.element_size() != 1 || !rows.is_contiguous() || rows.size(0) % 4 != 0 ||
        rows.size(1) % 4 != 0 || !aligned(rows.const_data_ptr())) {
      return std::nullopt;
    }
    const c10::cuda::CUDAGuard guard(rows.device());
    at::Tensor out = at::empty({rows.size(1), rows.size(0)}, rows.options());
    k8::cuda::transpose_bytes(static_cast<const std::uint8_t*>(rows.const_data_ptr()),
                              static_cast<std::uint8_t*>(out.mutable_data_ptr()), rows.size(0), rows.size(1), stream());
    return out;
  }
  std::optional<Quantized> rowwise_cast(const at::Tensor& x, std::int64_t reduced_dim, c10::ScalarType fp8,
                                       std::int32_t margin) const override {
    const c10::cuda::CUDAGuard guard(x.device());
    Quantized q = rowwise_buffers(x, reduced_dim, fp8);
    const bool rows = reduced_dim == 1;
    const at::Tensor workspace = rows ? at::Tensor() : at::empty({x.size(1)}, x.options().dtype(at::kFloat));
    k8::cuda::rowwise_cast(source_of(x), x.size(0), x.size(1), rows ? k8::Fp8Slices::Rows : k8::Fp8Slices::Columns,
                           format_of(fp8), margin, static_cast<std::uint8_t*>(q.data.mutable_data_ptr()),
                           q.inv_scale.mutable_data_ptr<float>(),
                           rows ? nullptr : workspace.mutable_data_ptr<float>(), stream());
    return q;
  }
};

// The device class of a measured fp8 decision (Note [fp8 selection]): name and capability.
std::string device_name(c10::DeviceIndex index) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
  return std::string(p->name) + " sm" + std::to_string(p->major) + std::to_string(p->minor);
}

const bool registered = [] {
  static const CudaPrimitives cuda;
  register_fused_primitives(c10::DeviceType::CUDA, &cuda);
  set_cuda_device_namer(&device_name);
  return true;
}();

}  // namespace
}  // namespace autocastgen::fp8::detail
