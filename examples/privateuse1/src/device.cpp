// The mydevice "hardware": a host-memory allocator, the device guard and the PrivateUse1 hooks
// PyTorch asks every PrivateUse1 backend for.
#include "mydevice.h"

#include <atomic>
#include <cstring>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

namespace mydevice {
namespace {

std::atomic<int64_t> live_bytes{0};

// Memory is host memory, but it is ours: every block is tagged with the device and counted, so a
// tensor that ends up here by mistake shows (memory_allocated()).
struct Block {
  void* data;
  size_t bytes;
};

void release(void* context) {
  auto* block = static_cast<Block*>(context);
  c10::free_cpu(block->data);
  live_bytes -= static_cast<int64_t>(block->bytes);
  delete block;
}

struct HostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t bytes) override {
    void* data = bytes == 0 ? nullptr : c10::alloc_cpu(bytes);
    live_bytes += static_cast<int64_t>(bytes);
    return {data, new Block{data, bytes}, &release, device()};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }  // data and context differ
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

HostAllocator allocator_instance;

// One device, mydevice:0, with one stream. Work is synchronous (the CPU kernels run at once), so
// events and stream waits have nothing to wait for.
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device requested) const override {
    setDevice(requested);
    return device();
  }
  c10::Device getDevice() const override { return device(); }
  void setDevice(c10::Device requested) const override {
    TORCH_CHECK(requested.type() == c10::DeviceType::PrivateUse1 && requested.index() <= 0,
                "mydevice: there is one device, mydevice:0, not ", requested);
  }
  void uncheckedSetDevice(c10::Device /*requested*/) const noexcept override {}
  c10::Stream getStream(c10::Device /*device*/) const override { return stream(); }
  c10::Stream getDefaultStream(c10::Device /*device*/) const override { return stream(); }
  c10::Stream exchangeStream(c10::Stream /*next*/) const override { return stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const c10::Stream& /*stream*/, c10::DeviceIndex /*index*/,
              c10::EventFlag /*flag*/) const override {
    *event = nullptr;  // nothing is ever pending
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/, c10::DeviceIndex /*index*/) const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(c10::DeviceIndex /*index*/) const override {}

 private:
  static c10::Stream stream() { return c10::Stream(c10::Stream::DEFAULT, device()); }
};

// Random numbers: the fallback runs random ops through the CPU kernels, so they draw from the CPU
// generator, and mydevice's default generator is that one (torch.manual_seed seeds it).
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override { return device(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    resize_storage_bytes(storage, bytes);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());  // lives as long as the process, as PyTorch expects
  return true;
}();

}  // namespace

c10::Allocator* allocator() { return &allocator_instance; }

int64_t memory_allocated() { return live_bytes.load(); }

void resize_storage_bytes(const c10::Storage& storage, size_t bytes) {
  TORCH_CHECK(storage.resizable(), "mydevice: this storage cannot be resized");
  c10::DataPtr fresh = allocator_instance.allocate(bytes);
  const size_t kept = std::min(bytes, storage.nbytes());
  if (kept > 0) std::memcpy(fresh.get(), storage.data(), kept);
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(bytes);
}

}  // namespace mydevice

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &mydevice::allocator_instance);
