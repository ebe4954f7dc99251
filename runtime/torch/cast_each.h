// The list forms of the wrappers' cast(), written once for both states: each takes the function
// that casts one tensor (PyTorch's cached_cast or autocastgen's). Not installed.
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

namespace autocastgen::detail {

template <typename CastOne>
std::optional<at::Tensor> cast_optional(const std::optional<at::Tensor>& tensor, const CastOne& cast_one) {
  if (!tensor.has_value()) return std::nullopt;
  return cast_one(*tensor);
}

// `tensors`: at::TensorList or at::ITensorListRef.
template <typename Tensors, typename CastOne>
std::vector<at::Tensor> cast_each(const Tensors& tensors, const CastOne& cast_one) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(cast_one(t));
  return out;
}

template <typename CastOne>
c10::List<std::optional<at::Tensor>> cast_each_optional(const c10::List<std::optional<at::Tensor>>& tensors,
                                                        const CastOne& cast_one) {
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(tensors.size());
  for (const std::optional<at::Tensor>& t : tensors) out.push_back(cast_optional(t, cast_one));
  return out;
}

}  // namespace autocastgen::detail
