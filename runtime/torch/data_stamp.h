// What a cache keyed on a tensor's identity checks before serving an entry (internal; Note [data stamps]).
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <c10/util/intrusive_ptr.h>

namespace autocastgen {

// Note [data stamps]
// The cast cache (state/cast_cache.cpp) and the fp8 weight cache (fp8/weight_cache.cpp) key an
// entry on a weight's TensorImpl, but a TensorImpl is not its data. An entry is served only while
// the weight still shows every mark its data had when the entry was made:
//   - the version counter: in-place ops, an optimizer step, `copy_` under no_grad,
//     `load_state_dict` (which copies under no_grad), `resize_`, `set_` on the tensor;
//   - the storage (held weakly, so its address cannot be taken by another storage while the entry
//     exists): `param.data = other`, which swaps the storage and keeps the version counter;
//   - the storage's data pointer and size: a storage resized, freed or refilled through
//     `untyped_storage().resize_()` (FSDP2's free and refill of unsharded parameters);
//   - the offset, sizes and strides: `.data =` with a tensor of another shape over the same storage.
// What no mark shows is a write through another tensor over the same memory that does not share the
// weight's version counter, into an allocation of the same size that came back at the same
// address (FSDP2's all-gather into a freed and re-allocated parameter does exactly this). The
// caches therefore also end with the autocast scope, as PyTorch's own cast cache does: the own
// state's outermost scope clears them, and the fp8 weight cache notices the end of PyTorch's
// outermost scope too (Note [PyTorch's scope end] in weight_cache.cpp). Within one scope the
// weights are the ones its forward saw; a step between two forwards must end the scope
// (tests/fp8/test_weight_cache_validity.py has one test per way).
class DataStamp {
 public:
  DataStamp() = default;
  explicit DataStamp(const at::Tensor& t)
      : storage_(t.storage().getWeakStorageImpl()),
        data_(t.storage().data()),
        nbytes_(t.storage().nbytes()),
        offset_(t.storage_offset()),
        version_(t._version()),
        sizes_(t.sizes().begin(), t.sizes().end()),
        strides_(t.strides().begin(), t.strides().end()) {}

  // Whether `t` still holds the data this stamp was taken of.
  [[nodiscard]] bool matches(const at::Tensor& t) const {
    const c10::Storage& storage = t.storage();
    return !storage_.expired() && storage.unsafeGetStorageImpl() == storage_._unsafe_get_target() &&
           storage.data() == data_ && storage.nbytes() == nbytes_ && t.storage_offset() == offset_ &&
           t._version() == version_ && t.sizes().equals(sizes_) && t.strides().equals(strides_);
  }

 private:
  c10::weak_intrusive_ptr<c10::StorageImpl> storage_{c10::intrusive_ptr<c10::StorageImpl>()};
  const void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::int64_t offset_ = 0;
  std::int64_t version_ = 0;
  c10::SmallVector<std::int64_t, 4> sizes_;
  c10::SmallVector<std::int64_t, 4> strides_;
};

}  // namespace autocastgen
