// All parsed schemas of a run, in declaration order, with lookup by operator and overload name.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/schema.h"

namespace autocastgen::model {

// What a schema file says about an entry beyond its `func:` (only what code generation needs).
struct SchemaAttributes {
  // `structured: True` or a `structured_delegate:`: torch's dispatcher then takes Tensor[] as
  // ITensorListRef.
  bool structured = false;
};

class SchemaSet {
 public:
  using Attributes = SchemaAttributes;

  // Adds a schema; returns the earlier schema with the same namespace, name and overload instead
  // of adding when there is one.
  [[nodiscard]] const FunctionSchema* add(FunctionSchema schema, Attributes attributes = {});
  [[nodiscard]] const Attributes& attributes(const FunctionSchema& schema) const;

  [[nodiscard]] const std::vector<FunctionSchema>& schemas() const { return schemas_; }
  // `ns` empty means aten; `unqualified` is `name` or `name.overload`.
  [[nodiscard]] const FunctionSchema* find(std::string_view ns, std::string_view unqualified) const;
  // Every overload of `ns::name`, in declaration order (empty when unknown).
  [[nodiscard]] std::vector<const FunctionSchema*> overloads(std::string_view ns, std::string_view name) const;
  // Distinct operator names of a namespace, in declaration order (for did-you-mean).
  [[nodiscard]] std::vector<std::string_view> operator_names(std::string_view ns) const;

 private:
  static std::string key(std::string_view ns, std::string_view unqualified);
  std::vector<FunctionSchema> schemas_;
  std::vector<Attributes> attributes_;  // parallel to schemas_
  std::unordered_map<std::string, size_t> by_overload_;
  std::unordered_map<std::string, std::vector<size_t>> by_name_;
  std::vector<std::string> name_order_;  // `ns::name`, first occurrence order
};

// An overload autocast may wrap: functional (not in-place, out=, mutable or scratch), writing none
// of its arguments, and with at least one Tensor-like input. When it is not, `reason` says why in a sentence fragment.
[[nodiscard]] bool is_autocast_eligible(const FunctionSchema& schema, std::string* reason = nullptr);

}  // namespace autocastgen::model
