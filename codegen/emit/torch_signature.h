// The torch target's type mapping: schema types -> the C++ types of PyTorch's dispatcher signature
// (at::_ops::<op>::call, SymInt kept), and the C++ names torch generates for each overload.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/schema.h"

namespace autocastgen::emit {

// The C++ parameter type of an argument, e.g. `const ::std::optional<at::Tensor>&`; nullopt for a
// type the mapping does not know (reported by the caller with the argument's location).
// `structured` ops (see SchemaSet::Attributes) take Tensor[] as `const at::ITensorListRef&`.
[[nodiscard]] std::optional<std::string> torch_argument_type(const model::Type& type, bool is_write, bool structured);
// The C++ return type of the whole returns list (`void`, one type, or `::std::tuple<...>`).
[[nodiscard]] std::optional<std::string> torch_return_type(const std::vector<model::Return>& returns);

// `mm`, `conv_transpose2d_input`, `__and___Tensor`: the at::_ops struct and our wrapper name.
[[nodiscard]] std::string torch_unambiguous_name(const model::OperatorName& name);
// The per-operator header declaring at::_ops::<op>: `ATen/ops/<root>_ops.h`.
[[nodiscard]] std::string torch_ops_header(const model::OperatorName& name);

// c10::DeviceType enumerator of a policy device (`cpu` -> `CPU`, `privateuseone` -> `PrivateUse1`).
[[nodiscard]] std::string torch_device_type(const std::string& device);

}  // namespace autocastgen::emit
