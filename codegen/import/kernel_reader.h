// What an m.impl kernel does, read off Clang's AST: the list policy it applies (Note [what the
// importer recognises] in import/kernel_reader.cpp), a fallthrough, or why it cannot be told.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "import/registrations.h"
#include "policy/policy.h"

namespace clang {
class ASTContext;
class Expr;
class FunctionDecl;
}  // namespace clang

namespace autocastgen::import::detail {

// What a kernel was read as: a policy (a wrapper with precision rules: its first entry, the others
// in `more`), a fallthrough, or unknown (`why`).
struct Kernel {
  enum class Kind { policy, fallthrough, unknown } kind = Kind::unknown;
  policy::PolicyKind policy = policy::PolicyKind::fp32;
  std::string redispatch_ops;
  std::string redispatch_qualified;  // the redispatch overload outside aten (`ns::name.overload`)
  std::string calls_ops;
  std::string message;
  bool message_is_literal = true;
  std::string device;
  std::string why;     // for unknown kernels
  bool error = false;  // an unknown kernel the importer refuses (an error, not a warning left out)
  ImportedRule rule;
  std::vector<Kernel> more;  // a wrapper with precision rules: its further entries, in order
};

// A wrapper template's `call` (case 1); nullopt when `f` is not one.
std::optional<Kernel> wrapper_template_kernel(const clang::FunctionDecl* f, clang::ASTContext& ctx);

// What a function's body does (cases 2 and 3).
Kernel body_kernel(const clang::FunctionDecl* f, clang::ASTContext& ctx);

// The function an m.impl kernel argument names; sets `fallthrough` for makeFallthrough() (case 4).
const clang::FunctionDecl* kernel_function(const clang::Expr* e, bool& fallthrough);

}  // namespace autocastgen::import::detail
