// mydevice's own kernels: creating tensors, copying to and from the host, and the view ops (which
// must share memory, so they cannot go through the copying fallback).
#include "mydevice.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace mydevice {

at::Tensor host_alias(const at::Tensor& device_tensor) {
  const at::TensorOptions cpu = device_tensor.options().device(c10::kCPU);
  if (device_tensor.numel() == 0) return at::empty_strided(device_tensor.sizes(), device_tensor.strides(), cpu);
  return at::from_blob(device_tensor.data_ptr(), device_tensor.sizes(), device_tensor.strides(), cpu);
}

// clone() keeps the layout of dense tensors and makes expanded (stride 0) ones dense.
at::Tensor to_cpu(const at::Tensor& device_tensor) { return host_alias(device_tensor).clone(); }

at::Tensor to_device(const at::Tensor& cpu_tensor) {
  at::Tensor out = at::empty_like(cpu_tensor, cpu_tensor.options().device(device()));
  host_alias(out).copy_(cpu_tensor);
  return out;
}

namespace {

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                 std::optional<at::Device> /*device*/, std::optional<bool> /*pin_memory*/,
                 std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "mydevice: only strided tensors, not ", *layout);
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype.value_or(at::get_default_dtype_as_scalartype()), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> /*device*/,
                         std::optional<bool> /*pin_memory*/) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "mydevice: only strided tensors, not ", *layout);
  return at::detail::empty_strided_generic(size, stride, allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype.value_or(at::get_default_dtype_as_scalartype()));
}

// Every copy that involves mydevice comes here (the dispatcher picks PrivateUse1 over CPU when the
// two meet): host to device, device to host and device to device, with dtype conversion and
// broadcasting done by the CPU copy kernel on host views of the memory.
at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  for (const at::Tensor* t : {static_cast<const at::Tensor*>(&self), &src})
    TORCH_CHECK(t->device().type() == c10::DeviceType::PrivateUse1 || t->device().is_cpu(),
                "mydevice: cannot copy between mydevice and ", t->device());
  at::Tensor destination = self.device().is_cpu() ? self : host_alias(self);
  destination.copy_(src.device().is_cpu() ? src : host_alias(src), non_blocking);
  return self;
}

}  // namespace
}  // namespace mydevice

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(mydevice::empty));
  m.impl("empty_strided", TORCH_FN(mydevice::empty_strided));
  m.impl("copy_", TORCH_FN(mydevice::copy_));
  // View ops: PyTorch's device-independent implementations, which share the storage. The other
  // view ops are composites of these.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  // Resizing reallocates through the storage's own allocator (ours).
  m.impl("resize_", TORCH_FN(at::native::resize_));
}
