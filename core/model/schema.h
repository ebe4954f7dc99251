// The parsed function schema: operator name, arguments, returns, alias annotations, schema kind.
// Values are immutable after construction; every node keeps the source location it came from.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/type.h"
#include "support/source_manager.h"

namespace autocastgen::model {

// `(a)`, `(a!)`, `(a|b)`, `(a -> *)`: which alias sets a tensor belongs to, and whether it is written.
struct Annotation {
  std::vector<char> alias_set;        // one lower-case letter each
  bool is_write = false;
  std::vector<char> alias_set_after;  // after `->`; '*' is the wildcard
  [[nodiscard]] std::string str() const;
  friend bool operator==(const Annotation&, const Annotation&) = default;
};

struct Argument {
  Type type;
  std::optional<Annotation> annotation;
  std::string name;
  std::optional<std::string> default_value;  // exactly as written, e.g. `[]`, `1e-05`, `"mean"`
  bool kwarg_only = false;                   // after `*`
  bool out = false;                          // a written keyword-only argument (torchgen's `out`)
  SourceLocation location;                   // the type's first token
  SourceLocation name_location;

  // Type with the annotation after `Tensor`, e.g. `Tensor(a!)[]`.
  [[nodiscard]] std::string type_str() const;
  [[nodiscard]] std::string str() const;
  [[nodiscard]] bool is_write() const { return annotation && annotation->is_write; }
};

struct Return {
  Type type;
  std::optional<Annotation> annotation;
  std::optional<std::string> name;
  SourceLocation location;
  [[nodiscard]] std::string str() const;
};

enum class SchemaKind { functional, inplace, out, mutable_, scratch };
[[nodiscard]] std::string_view spelling(SchemaKind kind);

// Schemas written without a namespace belong to aten.
inline constexpr std::string_view kDefaultNamespace = "aten";

struct OperatorName {
  std::string ns;        // empty when not written (aten's own file)
  std::string name;      // as written, e.g. `add_`, `__iand__`
  std::string overload;  // empty for the default overload
  SourceLocation location;
  SourceLocation overload_location;

  // torchgen's BaseOperatorName.inplace: `foo_` or an augmented-assignment dunder like `__iadd__`.
  [[nodiscard]] bool inplace() const;
  // `name` or `name.overload` (no namespace): how policies and at::_ops refer to the overload.
  [[nodiscard]] std::string unqualified() const;
  [[nodiscard]] std::string str() const;  // `[ns::]name[.overload]`, the namespace as written
  [[nodiscard]] bool is_aten() const { return ns.empty() || ns == kDefaultNamespace; }
  [[nodiscard]] std::string_view namespace_or_aten() const { return ns.empty() ? kDefaultNamespace : ns; }
  // `ns::name[.overload]` with aten's namespace spelled out: how the dispatcher names it.
  [[nodiscard]] std::string qualified() const;
  // `name[.overload]` in aten, `ns::name[.overload]` elsewhere: how policies and reports name it.
  [[nodiscard]] std::string display() const;
};

class FunctionSchema {
 public:
  FunctionSchema(OperatorName name, std::vector<Argument> arguments, std::vector<Return> returns,
                 SourceLocation location);

  [[nodiscard]] const OperatorName& name() const { return name_; }
  [[nodiscard]] const std::vector<Argument>& arguments() const { return arguments_; }
  [[nodiscard]] const std::vector<Return>& returns() const { return returns_; }
  [[nodiscard]] SchemaKind kind() const { return kind_; }
  [[nodiscard]] SourceLocation location() const { return location_; }

  [[nodiscard]] const Argument* find_argument(std::string_view name) const;
  // Tensor-like arguments whose element type can be floating point (what autocast may cast).
  [[nodiscard]] bool has_tensor_like_input() const;

  // Canonical text, identical to torchgen's `str(FunctionSchema.parse(s))`.
  [[nodiscard]] std::string str() const;

 private:
  OperatorName name_;
  std::vector<Argument> arguments_;
  std::vector<Return> returns_;
  SourceLocation location_;
  SchemaKind kind_;
};

}  // namespace autocastgen::model
