// What the mydevice backend's sources share: the device, its allocator and host transfers.
#pragma once

#include <cstdint>

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

namespace mydevice {

// mydevice:0, the only device (PrivateUse1, renamed to "mydevice" by the Python module).
inline c10::Device device() { return {c10::DeviceType::PrivateUse1, 0}; }

// The device's allocator and the bytes it holds now.
c10::Allocator* allocator();
int64_t memory_allocated();

// Grows or shrinks a mydevice storage, keeping its leading bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t bytes);

// Transfers between the host and the device. Device memory is host memory here, so a transfer is
// a copy through a CPU tensor that aliases the device tensor's memory (host_alias); a backend
// with real device memory would call its copy engine instead.
at::Tensor host_alias(const at::Tensor& device_tensor);
at::Tensor to_cpu(const at::Tensor& device_tensor);
at::Tensor to_device(const at::Tensor& cpu_tensor);

}  // namespace mydevice
