// Clang's locations as ours, its errors forwarded, and the small questions asked of the AST.
#include "import/clang_support.h"

#include <algorithm>

#include <clang/AST/DeclTemplate.h>
#include <clang/AST/ExprCXX.h>
#include <clang/ASTMatchers/ASTMatchFinder.h>
#include <clang/ASTMatchers/ASTMatchers.h>
#include <clang/Basic/FileManager.h>
#include <clang/Lex/Lexer.h>

namespace autocastgen::import::detail {

namespace fs = std::filesystem;
namespace am = clang::ast_matchers;

SourceLocation LocationMapper::map(const clang::SourceManager& sm, clang::SourceLocation loc, const fs::path& directory) {
  if (loc.isInvalid()) return {};
  loc = sm.getFileLoc(loc);
  const clang::FileEntry* entry = sm.getFileEntryForID(sm.getFileID(loc));
  if (!entry) return {};
  fs::path path = entry->getName().str();
  if (path.is_relative()) path = directory / path;
  const std::string key = canonical(path);
  auto it = by_path_.find(key);
  if (it == by_path_.end()) {
    std::string error;
    std::optional<uint32_t> file = sources_.add_file(path, error);
    if (!file) return {};
    it = by_path_.emplace(key, *file).first;
  }
  return {it->second, sm.getFileOffset(loc)};
}

uint32_t LocationMapper::token_length(const clang::SourceManager& sm, clang::SourceLocation loc, const clang::LangOptions& lang) {
  if (loc.isInvalid() || loc.isMacroID()) return 1;
  return std::max(1u, clang::Lexer::MeasureTokenLength(loc, sm, lang));
}

std::string LocationMapper::canonical(const fs::path& path) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(path, ec);
  return ec ? path.lexically_normal().string() : c.string();
}

void ForwardingConsumer::HandleDiagnostic(clang::DiagnosticsEngine::Level level, const clang::Diagnostic& info) {
  clang::DiagnosticConsumer::HandleDiagnostic(level, info);
  if (level < clang::DiagnosticsEngine::Error) return;
  llvm::SmallString<256> text;
  info.FormatDiagnostic(text);
  SourceLocation where;
  if (info.hasSourceManager()) where = mapper_.map(info.getSourceManager(), info.getLocation(), directory_);
  diags_.error(where, std::string(text.str()));
}

const clang::Expr* strip(const clang::Expr* e) {
  while (e) {
    const clang::Expr* next = e->IgnoreImplicit()->IgnoreParens();
    if (const auto* cast = llvm::dyn_cast<clang::CXXFunctionalCastExpr>(next)) next = cast->getSubExpr();
    else if (const auto* temp = llvm::dyn_cast<clang::MaterializeTemporaryExpr>(next)) next = temp->getSubExpr();
    else if (const auto* bind = llvm::dyn_cast<clang::CXXBindTemporaryExpr>(next)) next = bind->getSubExpr();
    else if (const auto* cleanups = llvm::dyn_cast<clang::ExprWithCleanups>(next)) next = cleanups->getSubExpr();
    if (next == e) return e;
    e = next;
  }
  return e;
}

const clang::StringLiteral* first_string_literal(const clang::Stmt* s) {
  if (!s) return nullptr;
  if (const auto* literal = llvm::dyn_cast<clang::StringLiteral>(s)) return literal;
  for (const clang::Stmt* child : s->children())
    if (const clang::StringLiteral* found = first_string_literal(child)) return found;
  return nullptr;
}

std::string enumerator_name(const clang::QualType type, const llvm::APSInt& value, const std::set<std::string>* prefer) {
  const auto* enum_type = type->getAs<clang::EnumType>();
  if (!enum_type) return {};
  std::string first;
  for (const clang::EnumConstantDecl* c : enum_type->getDecl()->enumerators()) {
    if (!llvm::APSInt::isSameValue(c->getInitVal(), value)) continue;
    const std::string name = c->getNameAsString();
    if (!prefer || prefer->count(name)) return name;
    if (first.empty()) first = name;
  }
  return prefer ? std::string() : first;
}

std::string qualified_enum_name(const clang::QualType type) {
  const auto* enum_type = type->getAs<clang::EnumType>();
  return enum_type ? enum_type->getDecl()->getQualifiedNameAsString() : std::string();
}

std::string qualified_name(const clang::FunctionDecl* f) { return f ? f->getQualifiedNameAsString() : std::string(); }

bool named(const clang::NamedDecl* decl, llvm::StringRef name) {
  return decl && decl->getDeclName().isIdentifier() && decl->getName() == name;
}

std::vector<const clang::CallExpr*> calls_in(const clang::Stmt* body, clang::ASTContext& ctx) {
  std::vector<const clang::CallExpr*> out;
  if (!body) return out;
  for (const am::BoundNodes& node : am::match(am::findAll(am::callExpr().bind("call")), *body, ctx))
    out.push_back(node.getNodeAs<clang::CallExpr>("call"));
  return out;
}

}  // namespace autocastgen::import::detail
