// Type construction, spelling and structural equality.
#include "model/type.h"

#include <array>
#include <cassert>
#include <stdexcept>

namespace autocastgen::model {

namespace {
// Named-tensor `Dimname` is used by every release up to 2.12's native_functions.yaml.
constexpr std::array<std::string_view, 20> kBaseSpellings = {
    "Generator", "ScalarType", "Tensor", "int",     "Dimname", "DimVector",    "float",   "str",
    "bool",      "Layout",     "Device", "DeviceIndex", "Scalar", "MemoryFormat", "QScheme",
    "Storage",   "Stream",     "SymInt", "SymBool", "GraphModule",
};
}  // namespace

std::string_view spelling(BaseTy base) { return kBaseSpellings[static_cast<size_t>(base)]; }

std::span<const std::string_view> base_ty_spellings() { return kBaseSpellings; }

std::optional<BaseTy> parse_base_ty(std::string_view text) {
  for (size_t i = 0; i < kBaseSpellings.size(); ++i)
    if (kBaseSpellings[i] == text) return static_cast<BaseTy>(i);
  return std::nullopt;
}

Type Type::base(BaseTy base) {
  return Type(std::make_shared<const Node>(Node{Kind::base, base, std::nullopt, {}, nullptr}));
}
Type Type::optional(Type elem) {
  return Type(std::make_shared<const Node>(
      Node{Kind::optional, BaseTy::Tensor, std::nullopt, {}, std::make_shared<const Type>(std::move(elem))}));
}
Type Type::list(Type elem, std::optional<uint32_t> size) {
  return Type(std::make_shared<const Node>(
      Node{Kind::list, BaseTy::Tensor, size, {}, std::make_shared<const Type>(std::move(elem))}));
}
Type Type::custom_class(std::string qualified_name) {
  return Type(std::make_shared<const Node>(
      Node{Kind::custom_class, BaseTy::Tensor, std::nullopt, std::move(qualified_name), nullptr}));
}

BaseTy Type::base_ty() const {
  if (kind() != Kind::base) throw std::logic_error("autocastgen: base_ty() of a non-base type");
  return node_->base;
}
const Type& Type::elem() const {
  if (!node_->elem) throw std::logic_error("autocastgen: elem() of a type without element");
  return *node_->elem;
}
std::optional<uint32_t> Type::size() const { return node_->size; }
const std::string& Type::class_name() const { return node_->class_name; }

bool Type::is_tensor_like() const {
  switch (kind()) {
    case Kind::base: return node_->base == BaseTy::Tensor;
    case Kind::optional:
    case Kind::list: return elem().is_tensor_like();
    case Kind::custom_class: return false;
  }
  return false;
}

bool Type::is_optional_scalar_type() const {
  return kind() == Kind::optional && elem().is_base(BaseTy::ScalarType);
}

std::string Type::str() const {
  switch (kind()) {
    case Kind::base: return std::string(spelling(node_->base));
    case Kind::optional: return elem().str() + "?";
    case Kind::list: return elem().str() + (node_->size ? "[" + std::to_string(*node_->size) + "]" : "[]");
    case Kind::custom_class: return "__torch__.torch.classes." + node_->class_name;
  }
  return {};
}

bool operator==(const Type& a, const Type& b) {
  if (a.node_ == b.node_) return true;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Type::Kind::base: return a.node_->base == b.node_->base;
    case Type::Kind::optional: return a.elem() == b.elem();
    case Type::Kind::list: return a.node_->size == b.node_->size && a.elem() == b.elem();
    case Type::Kind::custom_class: return a.node_->class_name == b.node_->class_name;
  }
  return false;
}

}  // namespace autocastgen::model
