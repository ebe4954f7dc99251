// Schema lookup tables and the autocast eligibility rule.
#include "model/schema_set.h"

#include <stdexcept>

#include <fmt/format.h>

namespace autocastgen::model {

std::string SchemaSet::key(std::string_view ns, std::string_view unqualified) {
  return fmt::format("{}::{}", ns.empty() ? kDefaultNamespace : ns, unqualified);
}

const FunctionSchema* SchemaSet::add(FunctionSchema schema, Attributes attributes) {
  const std::string overload_key = key(schema.name().ns, schema.name().unqualified());
  if (auto it = by_overload_.find(overload_key); it != by_overload_.end()) return &schemas_[it->second];
  // Pointers handed out earlier stay valid only until the next add; callers keep indices or names.
  const size_t index = schemas_.size();
  by_overload_.emplace(overload_key, index);
  const std::string name_key = key(schema.name().ns, schema.name().name);
  auto [it, inserted] = by_name_.try_emplace(name_key);
  if (inserted) name_order_.push_back(name_key);
  it->second.push_back(index);
  schemas_.push_back(std::move(schema));
  attributes_.push_back(attributes);
  return nullptr;
}

const SchemaSet::Attributes& SchemaSet::attributes(const FunctionSchema& schema) const {
  const auto index = static_cast<size_t>(&schema - schemas_.data());
  if (index >= schemas_.size()) throw std::out_of_range("autocastgen: schema does not belong to this SchemaSet");
  return attributes_[index];
}

const FunctionSchema* SchemaSet::find(std::string_view ns, std::string_view unqualified) const {
  auto it = by_overload_.find(key(ns, unqualified));
  return it == by_overload_.end() ? nullptr : &schemas_[it->second];
}

std::vector<const FunctionSchema*> SchemaSet::overloads(std::string_view ns, std::string_view name) const {
  std::vector<const FunctionSchema*> result;
  if (auto it = by_name_.find(key(ns, name)); it != by_name_.end())
    for (size_t index : it->second) result.push_back(&schemas_[index]);
  return result;
}

std::vector<std::string_view> SchemaSet::operator_names(std::string_view ns) const {
  const std::string prefix = key(ns, "");
  std::vector<std::string_view> names;
  for (const std::string& name : name_order_)
    if (name.starts_with(prefix)) names.push_back(std::string_view(name).substr(prefix.size()));
  return names;
}

bool is_autocast_eligible(const FunctionSchema& schema, std::string* reason) {
  if (schema.kind() != SchemaKind::functional) {
    if (reason) {
      switch (schema.kind()) {
        case SchemaKind::inplace: *reason = "it is an in-place overload"; break;
        case SchemaKind::out: *reason = "it is an out= overload"; break;
        case SchemaKind::mutable_: *reason = "it is a mutable overload (it writes an argument)"; break;
        case SchemaKind::scratch: *reason = "it is a scratch overload"; break;
        case SchemaKind::functional: break;
      }
      *reason += "; only functional overloads autocast";
    }
    return false;
  }
  // A few overloads torchgen calls functional still write `self` (set_data, record_stream, ...):
  // casting an argument that is written would lose the write.
  for (const Argument& arg : schema.arguments()) {
    if (arg.is_write()) {
      if (reason) *reason = fmt::format("it writes its argument '{}'", arg.name);
      return false;
    }
  }
  if (!schema.has_tensor_like_input()) {
    if (reason) *reason = "it has no Tensor-like input that could be floating point";
    return false;
  }
  return true;
}

}  // namespace autocastgen::model
