// The schema type algebra: base types, optional, list (with an optional fixed size), custom classes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace autocastgen::model {

// The base types of PyTorch's function-schema language (torchgen's BaseTy).
enum class BaseTy : uint8_t {
  Generator, ScalarType, Tensor, Int, Dimname, DimVector, Float, Str, Bool, Layout, Device, DeviceIndex,
  Scalar, MemoryFormat, QScheme, Storage, Stream, SymInt, SymBool, GraphModule,
};

[[nodiscard]] std::string_view spelling(BaseTy base);
[[nodiscard]] std::optional<BaseTy> parse_base_ty(std::string_view spelling);
// Every base type's spelling, in BaseTy order (for did-you-mean suggestions).
[[nodiscard]] std::span<const std::string_view> base_ty_spellings();

// An immutable type value; copies share structure.
class Type {
 public:
  enum class Kind : uint8_t { base, optional, list, custom_class };

  static Type base(BaseTy base);
  static Type optional(Type elem);
  static Type list(Type elem, std::optional<uint32_t> size = std::nullopt);
  // `qualified_name` is what follows `__torch__.torch.classes.`.
  static Type custom_class(std::string qualified_name);

  [[nodiscard]] Kind kind() const { return node_->kind; }
  [[nodiscard]] bool is_base(BaseTy b) const { return kind() == Kind::base && node_->base == b; }
  [[nodiscard]] BaseTy base_ty() const;              // requires kind() == base
  [[nodiscard]] const Type& elem() const;            // requires optional or list
  [[nodiscard]] std::optional<uint32_t> size() const;  // lists only
  [[nodiscard]] const std::string& class_name() const;  // custom classes only

  // Tensor, Tensor?, Tensor[], Tensor?[] (and deeper nestings of those): what autocast may cast.
  [[nodiscard]] bool is_tensor_like() const;
  // `ScalarType?`
  [[nodiscard]] bool is_optional_scalar_type() const;

  // Canonical spelling, e.g. `Tensor?[]`, `SymInt[2]`, `int[]?`.
  [[nodiscard]] std::string str() const;

  friend bool operator==(const Type& a, const Type& b);

 private:
  struct Node {
    Kind kind;
    BaseTy base = BaseTy::Tensor;
    std::optional<uint32_t> size;
    std::string class_name;
    std::shared_ptr<const Type> elem;
  };
  explicit Type(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

}  // namespace autocastgen::model
