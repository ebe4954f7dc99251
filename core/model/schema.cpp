// Canonical printing and classification of function schemas (the rules torchgen applies).
#include "model/schema.h"

#include <algorithm>
#include <array>

namespace autocastgen::model {

namespace {
std::string join_letters(const std::vector<char>& letters) {
  std::string out;
  for (char c : letters) {
    if (!out.empty()) out.push_back('|');
    out.push_back(c);
  }
  return out;
}

std::string type_with_annotation(const Type& type, const std::optional<Annotation>& annotation) {
  std::string text = type.str();
  if (annotation) {
    // The annotation sits right after the `Tensor` base: `Tensor(a!)?`, `Tensor(a)[]`.
    const auto pos = text.find("Tensor");
    if (pos != std::string::npos) text.insert(pos + 6, "(" + annotation->str() + ")");
  }
  return text;
}

// Augmented-assignment dunders (`__iadd__`, ...) are the in-place forms of these bases.
constexpr std::array<std::string_view, 11> kAugmentedAssignment = {
    "add", "sub", "mul", "div", "mod", "pow", "lshift", "rshift", "and", "xor", "or"};
}  // namespace

std::string Annotation::str() const {
  std::string text = join_letters(alias_set);
  if (is_write) text.push_back('!');
  if (!alias_set_after.empty()) text += " -> " + join_letters(alias_set_after);
  return text;
}

std::string Argument::type_str() const { return type_with_annotation(type, annotation); }

std::string Argument::str() const {
  std::string text = type_str() + " " + name;
  if (default_value) text += "=" + *default_value;
  return text;
}

std::string Return::str() const {
  std::string text = type_with_annotation(type, annotation);
  if (name) text += " " + *name;
  return text;
}

std::string_view spelling(SchemaKind kind) {
  switch (kind) {
    case SchemaKind::functional: return "functional";
    case SchemaKind::inplace: return "inplace";
    case SchemaKind::out: return "out";
    case SchemaKind::mutable_: return "mutable";
    case SchemaKind::scratch: return "scratch";
  }
  return "functional";
}

bool OperatorName::inplace() const {
  // A dunder is `__` + a word without underscores + `__` (so `__foo_bar__` is no dunder, and is
  // in-place by its trailing underscore, as in torchgen).
  if (name.size() > 4 && name.starts_with("__") && name.ends_with("__")) {
    const std::string_view inner = std::string_view(name).substr(2, name.size() - 4);
    if (inner.find('_') == std::string_view::npos)
      return inner.starts_with('i') &&
             std::find(kAugmentedAssignment.begin(), kAugmentedAssignment.end(), inner.substr(1)) !=
                 kAugmentedAssignment.end();
  }
  return !name.empty() && name.back() == '_';
}

std::string OperatorName::unqualified() const { return overload.empty() ? name : name + "." + overload; }

std::string OperatorName::str() const { return ns.empty() ? unqualified() : ns + "::" + unqualified(); }

std::string OperatorName::qualified() const { return std::string(namespace_or_aten()) + "::" + unqualified(); }

std::string OperatorName::display() const { return is_aten() ? unqualified() : ns + "::" + unqualified(); }

FunctionSchema::FunctionSchema(OperatorName name, std::vector<Argument> arguments, std::vector<Return> returns,
                               SourceLocation location)
    : name_(std::move(name)), arguments_(std::move(arguments)), returns_(std::move(returns)), location_(location) {
  // Classification as torchgen's SchemaKind: in-place by name wins, then scratch/out (written
  // keyword-only arguments), then mutable (a written positional argument after `self`).
  const bool is_out = std::any_of(arguments_.begin(), arguments_.end(), [](const Argument& a) { return a.out; });
  const bool is_scratch = std::any_of(arguments_.begin(), arguments_.end(),
                                      [](const Argument& a) { return a.out && a.name.starts_with("_scratch_"); });
  auto after_self = arguments_.begin();
  const auto self = std::find_if(arguments_.begin(), arguments_.end(),
                                 [](const Argument& a) { return !a.kwarg_only && a.name == "self"; });
  if (self != arguments_.end()) after_self = self + 1;
  const bool is_mutable = std::any_of(after_self, arguments_.end(),
                                      [](const Argument& a) { return !a.kwarg_only && a.is_write(); });
  if (name_.inplace()) kind_ = SchemaKind::inplace;
  else if (is_scratch) kind_ = SchemaKind::scratch;
  else if (is_out) kind_ = SchemaKind::out;
  else if (is_mutable) kind_ = SchemaKind::mutable_;
  else kind_ = SchemaKind::functional;
}

const Argument* FunctionSchema::find_argument(std::string_view arg_name) const {
  for (const Argument& a : arguments_)
    if (a.name == arg_name) return &a;
  return nullptr;
}

bool FunctionSchema::has_tensor_like_input() const {
  return std::any_of(arguments_.begin(), arguments_.end(), [](const Argument& a) { return a.type.is_tensor_like(); });
}

std::string FunctionSchema::str() const {
  std::string text = name_.str() + "(";
  bool first = true;
  bool star_printed = false;
  for (const Argument& a : arguments_) {
    if (a.kwarg_only && !star_printed) {
      text += first ? "*" : ", *";
      star_printed = true;
      first = false;
    }
    if (!first) text += ", ";
    text += a.str();
    first = false;
  }
  text += ") -> ";
  if (returns_.size() == 1) {
    text += returns_[0].str();
  } else {
    text += "(";
    for (size_t i = 0; i < returns_.size(); ++i) {
      if (i) text += ", ";
      text += returns_[i].str();
    }
    text += ")";
  }
  return text;
}

}  // namespace autocastgen::model
