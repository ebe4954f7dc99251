// A banned kernel defined in a header that the case includes as a system header (-isystem): the
// importer does not parse its body (Note [bodies the importer skips]), so it cannot read it as
// banned, and says so.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace vendor {

inline at::Tensor refuse_binary_cross_entropy(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                              int64_t) {
  TORCH_CHECK(false, "vendor: binary_cross_entropy is unsafe to autocast; use binary_cross_entropy_with_logits");
}

}  // namespace vendor
