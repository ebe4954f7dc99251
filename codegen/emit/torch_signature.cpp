// Type mapping rules of PyTorch's dispatcher API (facts from torchgen's api/cpp.py, written anew).
#include "emit/torch_signature.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace autocastgen::emit {

using model::BaseTy;
using model::Type;

namespace {

// Value types: what a base type is when held by value.
std::optional<std::string> base_value_type(BaseTy base) {
  switch (base) {
    case BaseTy::Int: return "int64_t";
    case BaseTy::Float: return "double";
    case BaseTy::Bool: return "bool";
    case BaseTy::Str: return "c10::string_view";
    case BaseTy::ScalarType: return "at::ScalarType";
    case BaseTy::Layout: return "at::Layout";
    case BaseTy::Device: return "at::Device";
    case BaseTy::DeviceIndex: return "at::DeviceIndex";
    case BaseTy::MemoryFormat: return "at::MemoryFormat";
    case BaseTy::Generator: return "at::Generator";
    case BaseTy::Storage: return "at::Storage";
    case BaseTy::Stream: return "at::Stream";
    case BaseTy::QScheme: return "at::QScheme";
    case BaseTy::SymInt: return "c10::SymInt";
    case BaseTy::SymBool: return "c10::SymBool";
    case BaseTy::DimVector: return "at::DimVector";
    case BaseTy::Dimname: return "at::Dimname";
    case BaseTy::Tensor:
    case BaseTy::Scalar:
    case BaseTy::GraphModule: return std::nullopt;
  }
  return std::nullopt;
}

// torchgen's valuetype_type: base value types, their optionals, and fixed-size bool lists.
std::optional<std::string> value_type(const Type& type) {
  switch (type.kind()) {
    case Type::Kind::base: return base_value_type(type.base_ty());
    case Type::Kind::optional: {
      auto elem = value_type(type.elem());
      if (!elem) return std::nullopt;
      return "::std::optional<" + *elem + ">";
    }
    case Type::Kind::list:
      if (type.elem().is_base(BaseTy::Bool) && type.size()) return "::std::array<bool," + std::to_string(*type.size()) + ">";
      return std::nullopt;
    case Type::Kind::custom_class: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> argument_type(const Type& type, bool is_write, bool structured) {
  if (auto value = value_type(type)) return value;
  switch (type.kind()) {
    case Type::Kind::base:
      if (type.is_base(BaseTy::Tensor)) return is_write ? "at::Tensor&" : "const at::Tensor&";
      if (type.is_base(BaseTy::Scalar)) return "const at::Scalar&";
      return std::nullopt;
    case Type::Kind::optional: {
      const Type& elem = type.elem();
      if (elem.is_base(BaseTy::Tensor)) return is_write ? "::std::optional<at::Tensor>&" : "const ::std::optional<at::Tensor>&";
      if (elem.is_base(BaseTy::Scalar)) return "const ::std::optional<at::Scalar>&";
      if (elem.kind() == Type::Kind::list && elem.elem().is_base(BaseTy::Int)) return "at::OptionalIntArrayRef";
      if (elem.kind() == Type::Kind::list && elem.elem().is_base(BaseTy::SymInt)) return "at::OptionalSymIntArrayRef";
      auto inner = argument_type(elem, is_write, structured);
      if (!inner) return std::nullopt;
      return "::std::optional<" + *inner + ">";
    }
    case Type::Kind::list: {
      const Type& elem = type.elem();
      if (elem.is_base(BaseTy::Tensor)) return structured ? "const at::ITensorListRef&" : "at::TensorList";
      if (elem.kind() == Type::Kind::optional && elem.elem().is_base(BaseTy::Tensor))
        return "const c10::List<::std::optional<at::Tensor>>&";
      if (elem.is_base(BaseTy::Int)) return "at::IntArrayRef";
      if (elem.is_base(BaseTy::SymInt)) return "c10::SymIntArrayRef";
      if (elem.is_base(BaseTy::Dimname)) return "at::DimnameList";
      // Other lists hold their elements by value.
      std::optional<std::string> inner = elem.is_base(BaseTy::Scalar) ? std::optional<std::string>("at::Scalar") : value_type(elem);
      if (!inner) return std::nullopt;
      return "at::ArrayRef<" + *inner + ">";
    }
    case Type::Kind::custom_class: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> return_type(const Type& type, bool is_write) {
  if (auto value = value_type(type)) return value;
  switch (type.kind()) {
    case Type::Kind::base:
      if (type.is_base(BaseTy::Tensor)) return is_write ? "at::Tensor&" : "at::Tensor";
      if (type.is_base(BaseTy::Scalar)) return "at::Scalar";
      return std::nullopt;
    case Type::Kind::optional: {
      if (!type.elem().is_base(BaseTy::Tensor)) return std::nullopt;
      return "::std::optional<at::Tensor>";
    }
    case Type::Kind::list: {
      if (type.size()) return std::nullopt;
      auto elem = return_type(type.elem(), false);
      if (!elem) return std::nullopt;
      return "::std::vector<" + *elem + ">";
    }
    case Type::Kind::custom_class: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> torch_argument_type(const Type& type, bool is_write, bool structured) {
  return argument_type(type, is_write, structured);
}

std::optional<std::string> torch_return_type(const std::vector<model::Return>& returns) {
  if (returns.empty()) return "void";
  std::vector<std::string> types;
  for (const model::Return& r : returns) {
    auto type = return_type(r.type, r.annotation && r.annotation->is_write);
    if (!type) return std::nullopt;
    types.push_back(*type);
  }
  if (types.size() == 1) return types.front();
  std::string tuple = "::std::tuple<";
  for (size_t i = 0; i < types.size(); ++i) tuple += (i ? "," : "") + types[i];
  return tuple + ">";
}

std::string torch_unambiguous_name(const model::OperatorName& name) {
  return name.overload.empty() ? name.name : name.name + "_" + name.overload;
}

std::string torch_ops_header(const model::OperatorName& name) {
  // The root name: without dunder underscores, the in-place `_`/`i`, and a `_functional` suffix.
  std::string root = name.name;
  if (root.size() > 4 && root.starts_with("__") && root.ends_with("__")) {
    root = root.substr(2, root.size() - 4);
    if (name.inplace()) root.erase(0, 1);
  } else if (name.inplace()) {
    root.pop_back();
  }
  constexpr std::string_view kFunctional = "_functional";
  if (root.ends_with(kFunctional)) root.resize(root.size() - kFunctional.size());
  return "ATen/ops/" + root + "_ops.h";
}

std::string torch_device_type(const std::string& device) {
  if (device == "privateuseone") return "PrivateUse1";
  if (device == "cuda" || device == "cpu" || device == "xpu" || device == "ipu" || device == "hpu" || device == "xla" ||
      device == "mps" || device == "mtia" || device == "maia") {
    std::string upper = device;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return upper;
  }
  return device;
}

}  // namespace autocastgen::emit
