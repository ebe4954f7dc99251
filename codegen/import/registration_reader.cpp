// The per-translation-unit pass: TORCH_LIBRARY_IMPL blocks, their m.impl calls and the module
// sections of one file, read into registrations.
#include "import/registration_reader.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/ExprCXX.h>
#include <clang/ASTMatchers/ASTMatchFinder.h>
#include <clang/ASTMatchers/ASTMatchers.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <fmt/format.h>

#include "import/kernel_reader.h"

namespace autocastgen::import::detail {

namespace am = clang::ast_matchers;
using policy::PolicyKind;

namespace {

struct Block {
  std::string dispatch_key;
  std::string ns;
  size_t index = 0;  // in ImportState::blocks
};

class Collector : public am::MatchFinder::MatchCallback {
 public:
  std::vector<const clang::VarDecl*> libraries;
  std::vector<const clang::VarDecl*> sections;  // rt::ModuleSections (Note [precision by place])
  std::vector<std::pair<const clang::CXXMemberCallExpr*, const clang::FunctionDecl*>> impls;
  std::vector<std::pair<const clang::FunctionDecl*, const clang::FunctionDecl*>> passes;  // caller, callee

  void run(const am::MatchFinder::MatchResult& result) override {
    if (const auto* lib = result.Nodes.getNodeAs<clang::VarDecl>("library")) libraries.push_back(lib);
    if (const auto* var = result.Nodes.getNodeAs<clang::VarDecl>("sections")) sections.push_back(var);
    if (const auto* impl = result.Nodes.getNodeAs<clang::CXXMemberCallExpr>("impl"))
      impls.emplace_back(impl, result.Nodes.getNodeAs<clang::FunctionDecl>("function"));
    if (const auto* call = result.Nodes.getNodeAs<clang::CallExpr>("pass"))
      if (const clang::FunctionDecl* callee = call->getDirectCallee())
        passes.emplace_back(result.Nodes.getNodeAs<clang::FunctionDecl>("function"), callee);
  }
};

class ImportConsumer : public clang::ASTConsumer {
 public:
  ImportConsumer(ImportState& state, const clang::SourceManager& sources) : state_(state), sources_(sources) {}

  // Note [bodies the importer skips]: of the functions defined in system headers (torch's,
  // included with -isystem), the importer reads only the at:: functions of ATen/ops/*.h, whose
  // body names the at::_ops a KERNEL_* helper redispatches to (case 1); Clang skips parsing the
  // rest (SkipFunctionBodies), which takes a file including ATen/autocast_mode.h from 7.6 to 4.6
  // s. The files it imports and the user's own headers are read whole.
  bool shouldSkipFunctionBody(clang::Decl* d) override {
    const clang::SourceLocation loc = sources_.getExpansionLoc(d->getLocation());
    return sources_.isInSystemHeader(loc) && !sources_.getFilename(loc).contains("/ATen/ops/");
  }

  void HandleTranslationUnit(clang::ASTContext& ctx) override {
    if (ctx.getDiagnostics().hasErrorOccurred()) return;  // reported; the AST is not trustworthy
    const clang::SourceManager& sm = ctx.getSourceManager();
    // Only what the main file declares: the registrations, not the torch headers.
    std::vector<clang::Decl*> scope;
    for (clang::Decl* d : ctx.getTranslationUnitDecl()->decls())
      if (sm.isInMainFile(sm.getExpansionLoc(d->getLocation()))) scope.push_back(d);
    ctx.setTraversalScope(scope);

    using namespace am;
    const auto library_record = cxxRecordDecl(hasName("::torch::Library"));
    Collector collector;
    MatchFinder finder;
    finder.addMatcher(
        varDecl(hasType(cxxRecordDecl(hasName("::torch::detail::TorchLibraryInit"))), hasInitializer(expr())).bind("library"),
        &collector);
    finder.addMatcher(cxxMemberCallExpr(callee(cxxMethodDecl(hasName("impl"), ofClass(library_record))),
                                        hasAncestor(functionDecl().bind("function")))
                          .bind("impl"),
                      &collector);
    // Generated files name the type through an alias (rt::ModuleSections).
    finder.addMatcher(varDecl(hasType(hasUnqualifiedDesugaredType(recordType(hasDeclaration(cxxRecordDecl(hasName(
                                  "::autocastgen::modules::Sections")))))),
                              hasInitializer(expr()))
                          .bind("sections"),
                      &collector);
    // Helpers that take the library and register on it: followed from the blocks that call them.
    finder.addMatcher(callExpr(callee(functionDecl(hasAnyParameter(hasType(references(library_record))))),
                               hasAncestor(functionDecl().bind("function")))
                          .bind("pass"),
                      &collector);
    finder.matchAST(ctx);
    process(ctx, collector);
  }

 private:
  SourceLocation ours(const clang::SourceManager& sm, clang::SourceLocation loc) { return state_.mapper.map(sm, loc, state_.directory); }

  std::optional<Block> block_of(const clang::VarDecl* var) {
    const auto* construct = llvm::dyn_cast_or_null<clang::CXXConstructExpr>(strip(var->getInit()));
    if (!construct || construct->getNumArgs() < 4) return std::nullopt;
    const auto* kind = llvm::dyn_cast<clang::DeclRefExpr>(strip(construct->getArg(0)));
    if (!kind || kind->getDecl()->getName() != "IMPL") return std::nullopt;  // TORCH_LIBRARY / FRAGMENT define ops
    const clang::StringLiteral* ns = first_string_literal(construct->getArg(2));
    if (!ns) return std::nullopt;
    // The key: the c10::DispatchKey enumerator inside std::make_optional(...).
    std::string key;
    auto find_key = [&](auto&& self, const clang::Stmt* s) -> void {
      if (!s || !key.empty()) return;
      if (const auto* ref = llvm::dyn_cast<clang::DeclRefExpr>(s)) {
        if (const auto* c = llvm::dyn_cast<clang::EnumConstantDecl>(ref->getDecl());
            c && qualified_enum_name(ref->getType()) == "c10::DispatchKey") {
          // Aliases (`Autocast` is AutocastCUDA) resolve by value to the key's own name.
          key = enumerator_name(ref->getType(), c->getInitVal(), &state_.autocast_keys);
          if (key.empty()) key = "-";  // a key, but not an autocast key
        }
      }
      for (const clang::Stmt* child : s->children()) self(self, child);
    };
    find_key(find_key, construct->getArg(3));
    if (key.empty() || key == "-") return std::nullopt;
    state_.blocks.push_back({key, ours(var->getASTContext().getSourceManager(), var->getLocation()), 0, 0});
    return Block{key, ns->getString().str(), state_.blocks.size() - 1};
  }

  // `rt::ModuleSections autocastgen_sections{kDevice, "owner", {{"lm_head", rt::SectionKind::fp32,
  // c10::ScalarType::Undefined, "where"}, ...}}`: the device and each rule; a warning when a rule is
  // not in that form.
  void read_sections(clang::ASTContext& ctx, const clang::VarDecl* var) {
    const clang::SourceManager& sm = ctx.getSourceManager();
    const auto* construct = llvm::dyn_cast_or_null<clang::CXXConstructExpr>(strip(var->getInit()));
    const SourceLocation where = ours(sm, var->getLocation());
    clang::Expr::EvalResult device;
    if (!construct || construct->getNumArgs() < 3 || !construct->getArg(0)->EvaluateAsRValue(device, ctx) || !device.Val.isInt()) {
      state_.diags.warning(where, "a module section that is not one autocastgen generates; left out");
      return;
    }
    ImportedSections imported{enumerator_name(construct->getArg(0)->getType(), device.Val.getInt()), {}, where};
    bool ok = true;
    auto visit = [&](auto&& self, const clang::Stmt* s) -> void {
      if (!s) return;
      const auto* list = llvm::dyn_cast<clang::InitListExpr>(s);
      const clang::CXXRecordDecl* record = list ? list->getType()->getAsCXXRecordDecl() : nullptr;
      if (!record || record->getQualifiedNameAsString() != "autocastgen::modules::SectionRule") {
        for (const clang::Stmt* child : s->children()) self(self, child);
        return;
      }
      const auto enumerator = [](const clang::Expr* e) -> std::string {
        std::string name;
        auto find = [&](auto&& again, const clang::Stmt* n) -> void {
          if (!n || !name.empty()) return;
          if (const auto* ref = llvm::dyn_cast<clang::DeclRefExpr>(n))
            if (const auto* c = llvm::dyn_cast<clang::EnumConstantDecl>(ref->getDecl())) name = c->getNameAsString();
          for (const clang::Stmt* child : n->children()) again(again, child);
        };
        find(find, e);
        return name;
      };
      const clang::StringLiteral* pattern = list->getNumInits() == 4 ? first_string_literal(list->getInit(0)) : nullptr;
      const std::string kind = pattern ? enumerator(list->getInit(1)) : std::string();
      const std::string dtype = pattern ? enumerator(list->getInit(2)) : std::string();
      std::optional<policy::ModuleSection> section;
      if (kind == "fp32" || kind == "off") section = policy::parse_section_value(kind);
      if (kind == "fp8_on" || kind == "fp8_off") section = policy::parse_section_value(kind == "fp8_on" ? "{fp8: on}" : "{fp8: off}");
      for (const policy::DtypeName& d : policy::dtype_names())
        if (kind == "dtype" && d.c10 == dtype) section = policy::parse_section_value(d.name);
      if (!section) {
        ok = false;
        return;
      }
      section->pattern = pattern->getString().str();
      section->location = ours(sm, pattern->getBeginLoc());
      imported.sections.push_back(std::move(*section));
    };
    visit(visit, construct->getArg(2));
    if (!ok || imported.device_type.empty()) {
      state_.diags.warning(where, "a module section whose rules are not ones autocastgen generates; left out");
      return;
    }
    state_.sections.push_back(std::move(imported));
  }

  void process(clang::ASTContext& ctx, const Collector& found) {
    const clang::SourceManager& sm = ctx.getSourceManager();
    const clang::LangOptions& lang = ctx.getLangOpts();
    for (const clang::VarDecl* var : found.sections) read_sections(ctx, var);
    // Blocks by their init function, then functions reachable from them through `passes`.
    std::map<const clang::FunctionDecl*, std::vector<Block>> blocks;
    for (const clang::VarDecl* var : found.libraries) {
      const auto* construct = llvm::dyn_cast_or_null<clang::CXXConstructExpr>(strip(var->getInit()));
      if (!construct || construct->getNumArgs() < 2) continue;
      bool unused = false;
      const clang::FunctionDecl* init = kernel_function(construct->getArg(1), unused);
      if (!init) continue;
      if (std::optional<Block> block = block_of(var)) blocks[init->getCanonicalDecl()].push_back(*block);
    }
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [caller, callee] : found.passes) {
        if (!caller) continue;
        auto from = blocks.find(caller->getCanonicalDecl());
        if (from == blocks.end()) continue;
        const std::vector<Block> add = from->second;
        std::vector<Block>& to = blocks[callee->getCanonicalDecl()];
        for (const Block& b : add) {
          const bool present = std::any_of(to.begin(), to.end(), [&](const Block& x) { return x.dispatch_key == b.dispatch_key && x.ns == b.ns; });
          if (!present) {
            to.push_back(b);
            grew = true;
          }
        }
      }
    }

    for (const auto& [call, function] : found.impls) {
      if (!function) continue;
      auto it = blocks.find(function->getCanonicalDecl());
      if (it == blocks.end() || call->getNumArgs() < 2) continue;
      const clang::StringLiteral* name = first_string_literal(call->getArg(0));
      const clang::SourceLocation call_loc = call->getBeginLoc();
      if (!name) {
        state_.diags.warning(ours(sm, call_loc), "m.impl with an op name that is not a string literal; left out");
        continue;
      }
      // Point at the op's name when it is written in the file, else at the macro that expands to the call.
      const bool literal_in_file = name->getBeginLoc().isFileID();
      const clang::SourceLocation where = literal_in_file ? name->getBeginLoc() : call_loc;
      const SourceLocation location = ours(sm, where);
      const uint32_t length = LocationMapper::token_length(sm, sm.getFileLoc(where), lang);

      bool fallthrough = false;
      const clang::FunctionDecl* kernel_fn = kernel_function(call->getArg(1), fallthrough);
      for (const Block& block : it->second) {
        FoundBlock& found_block = state_.blocks[block.index];
        ++(fallthrough ? found_block.fallthroughs : found_block.kernels);
      }
      if (fallthrough) continue;  // an explicit fallthrough: the op is unlisted
      Kernel kernel;
      if (!kernel_fn) {
        kernel.why = "its kernel is not a function, a lambda or a wrapper template the importer knows";
      } else if (std::optional<Kernel> k = wrapper_template_kernel(kernel_fn, ctx)) {
        kernel = *k;
      } else {
        kernel = body_kernel(kernel_fn, ctx);
      }
      const std::string op = name->getString().str();
      if (kernel.kind == Kernel::Kind::fallthrough) {  // a wrapper that casts in no dtype: the op is unlisted
        for (const Block& block : it->second) {
          --state_.blocks[block.index].kernels;
          ++state_.blocks[block.index].fallthroughs;
        }
        continue;
      }
      if (kernel.kind != Kernel::Kind::policy && kernel.error) {
        state_.diags.error(location, fmt::format("'{}': {}", op, kernel.why), length);
        continue;
      }
      if (kernel.kind != Kernel::Kind::policy) {
        state_.diags.warning(location, fmt::format("'{}': {}; left out of the imported policy", op, kernel.why), length);
        continue;
      }
      if (kernel.policy == PolicyKind::banned && !kernel.message_is_literal) {
        state_.diags.warning(location, fmt::format("'{}' is banned, but its error message is not made of string literals; "
                                                   "the imported entry says so instead",
                                                   op),
                             length);
        kernel.message = fmt::format("{} is not supported under autocast (banned)", op);
      }
      std::vector<const Kernel*> entries = {&kernel};
      for (const Kernel& more : kernel.more) entries.push_back(&more);
      for (const Block& block : it->second) {
        for (const Kernel* entry : entries) {
          Registration r;
          r.dispatch_key = block.dispatch_key;
          r.block_ns = block.ns;
          r.op_text = op;
          r.location = location;
          r.length = length;
          r.policy = entry->policy;
          r.redispatch_ops = entry->redispatch_ops;
          r.redispatch_qualified = entry->redispatch_qualified;
          r.calls_ops = entry->calls_ops;
          r.message = entry->message;
          r.kernel_device = entry->device;
          r.rule = entry->rule;
          state_.registrations.push_back(std::move(r));
        }
      }
    }
  }

  ImportState& state_;
  const clang::SourceManager& sources_;
};

class ImportAction : public clang::ASTFrontendAction {
 public:
  explicit ImportAction(ImportState& state) : state_(state) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci, llvm::StringRef) override {
    ci.getFrontendOpts().SkipFunctionBodies = true;  // asks the consumer (Note [bodies the importer skips])
    return std::make_unique<ImportConsumer>(state_, ci.getSourceManager());
  }

 private:
  ImportState& state_;
};

}  // namespace

std::unique_ptr<clang::FrontendAction> import_action(ImportState& state) { return std::make_unique<ImportAction>(state); }

}  // namespace autocastgen::import::detail
