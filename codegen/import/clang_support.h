// Clang as the importer's files see it: its locations as ours, its errors forwarded to our
// diagnostics engine, and the small questions they ask of the AST. Internal to the importer plugin.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <clang/AST/ASTContext.h>
#include <clang/AST/Expr.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceManager.h>
#include <llvm/ADT/APSInt.h>
#include <llvm/ADT/StringRef.h>

#include "support/diagnostics.h"

namespace autocastgen::import::detail {

// ---------------------------------------------------------------------------------------------
// Clang locations -> ours.

class LocationMapper {
 public:
  explicit LocationMapper(SourceManager& sources) : sources_(sources) {}

  void add_known(const std::filesystem::path& path, uint32_t file) { by_path_.emplace(canonical(path), file); }

  SourceLocation map(const clang::SourceManager& sm, clang::SourceLocation loc, const std::filesystem::path& directory);

  // The length of the token at `loc` (for carets), 1 when it is not in a file.
  static uint32_t token_length(const clang::SourceManager& sm, clang::SourceLocation loc, const clang::LangOptions& lang);

 private:
  static std::string canonical(const std::filesystem::path& path);
  SourceManager& sources_;
  std::map<std::string, uint32_t> by_path_;
};

// Forwards Clang's errors to our engine (file:line:col, source line, caret); warnings are dropped.
class ForwardingConsumer : public clang::DiagnosticConsumer {
 public:
  ForwardingConsumer(LocationMapper& mapper, DiagnosticEngine& diags) : mapper_(mapper), diags_(diags) {}
  void set_directory(std::filesystem::path directory) { directory_ = std::move(directory); }

  void HandleDiagnostic(clang::DiagnosticsEngine::Level level, const clang::Diagnostic& info) override;

 private:
  LocationMapper& mapper_;
  DiagnosticEngine& diags_;
  std::filesystem::path directory_;
};

// ---------------------------------------------------------------------------------------------
// Questions asked of the AST.

// `e` under its implicit nodes, parentheses, functional casts and temporaries.
const clang::Expr* strip(const clang::Expr* e);

// The first string literal under `s`, depth first.
const clang::StringLiteral* first_string_literal(const clang::Stmt* s);

// The name of the enumerator of enum `type` with `value` (the first one, or the first in `prefer`
// when given); empty when there is none.
std::string enumerator_name(clang::QualType type, const llvm::APSInt& value, const std::set<std::string>* prefer = nullptr);

// The qualified name of enum `type`; empty when it is not an enum.
std::string qualified_enum_name(clang::QualType type);

std::string qualified_name(const clang::FunctionDecl* f);

// Is `decl` named by the plain identifier `name`? Operators (`operator[]`, `operator+=`),
// constructors and conversions have no identifier, and asking them for one asserts in Clang.
bool named(const clang::NamedDecl* decl, llvm::StringRef name);

// Every call under `body`.
std::vector<const clang::CallExpr*> calls_in(const clang::Stmt* body, clang::ASTContext& ctx);

}  // namespace autocastgen::import::detail
