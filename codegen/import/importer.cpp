// The C++ importer: parses registration sources with Clang and reads policies off the AST.
//
// Note [what the importer recognises] (in import/kernel_reader.cpp) says which kernels it reads.
#include "import/importer.h"
#include "import/cast_values.h"
#include "import/clang_support.h"
#include "import/compile_command.h"
#include "import/kernel_reader.h"
#include "import/registrations.h"
#include "import/plugin.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_map>

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/ExprCXX.h>
#include <clang/ASTMatchers/ASTMatchFinder.h>
#include <clang/ASTMatchers/ASTMatchers.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/FileManager.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Lex/Lexer.h>
#include <clang/Tooling/ArgumentsAdjusters.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <fmt/format.h>

#include "emit/torch_signature.h"
#include "policy/resolver.h"
#include "host/python.h"
#include "support/strings.h"

#ifndef AUTOCASTGEN_TORCH_DIR_DEFAULT
#define AUTOCASTGEN_TORCH_DIR_DEFAULT ""
#endif
#ifndef AUTOCASTGEN_RUNTIME_INCLUDE_DEFAULT
#define AUTOCASTGEN_RUNTIME_INCLUDE_DEFAULT ""
#endif
#ifndef AUTOCASTGEN_CLANG_RESOURCE_DIR
#define AUTOCASTGEN_CLANG_RESOURCE_DIR ""
#endif

namespace autocastgen::import {

namespace fs = std::filesystem;
namespace am = clang::ast_matchers;
using policy::PolicyKind;
using detail::body_kernel;
using detail::enumerator_name;
using detail::first_string_literal;
using detail::ForwardingConsumer;
using detail::FoundBlock;
using detail::ImportedCondition;
using detail::ImportedRule;
using detail::ImportedSections;
using detail::Kernel;
using detail::kernel_function;
using detail::LocationMapper;
using detail::qualified_enum_name;
using detail::Registration;
using detail::strip;
using detail::wrapper_template_kernel;

namespace {

// ---------------------------------------------------------------------------------------------
// Finding PyTorch and our runtime headers.

std::optional<fs::path> torch_dir(std::string& why_not) {
  std::error_code ec;
  auto has_headers = [&](const fs::path& dir) { return fs::exists(dir / "include" / "torch" / "library.h", ec); };
  if (const char* env = std::getenv("AUTOCASTGEN_TORCH_DIR"); env && *env) {
    if (has_headers(env)) return fs::path(env);
    why_not = fmt::format("AUTOCASTGEN_TORCH_DIR={} has no include/torch/library.h", env);
    return std::nullopt;
  }
  if (const fs::path built = AUTOCASTGEN_TORCH_DIR_DEFAULT; !built.empty() && has_headers(built)) return built;
  const std::optional<fs::path> asked = python_package_dir("torch", why_not);
  if (!asked) return std::nullopt;
  if (has_headers(*asked)) return *asked;
  why_not = fmt::format("the torch package at {} has no C++ headers (include/torch/library.h)", asked->string());
  return std::nullopt;
}

// <prefix>/include next to an installed binary, else this source tree's runtime/include.
std::optional<fs::path> runtime_include() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "include";
    if (fs::exists(installed / "autocastgen" / "torch" / "policy_call.h", ec)) return installed;
  }
  const fs::path source = AUTOCASTGEN_RUNTIME_INCLUDE_DEFAULT;
  if (!source.empty() && fs::exists(source / "autocastgen" / "torch" / "policy_call.h", ec)) return source;
  return std::nullopt;
}

struct Block {
  std::string dispatch_key;
  std::string ns;
  size_t index = 0;  // in ImportState::blocks
};

// ---------------------------------------------------------------------------------------------
// The per-translation-unit pass.

struct ImportState {
  LocationMapper& mapper;
  DiagnosticEngine& diags;
  std::set<std::string> autocast_keys;
  std::vector<Registration> registrations;
  std::vector<ImportedSections> sections;
  std::vector<FoundBlock> blocks;
  fs::path directory;  // of the current compile command
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

std::optional<std::vector<std::string>> default_compiler_args(const fs::path& given_torch_dir, std::string& why_not) {
  const std::optional<fs::path> torch = given_torch_dir.empty() ? torch_dir(why_not) : std::optional(given_torch_dir);
  if (!torch) return std::nullopt;
  std::vector<std::string> args = {"-std=c++20", "-isystem", (*torch / "include").string(), "-isystem",
                                   (*torch / "include" / "torch" / "csrc" / "api" / "include").string()};
  if (const std::optional<fs::path> runtime = runtime_include()) {
    args.push_back("-isystem");
    args.push_back(runtime->string());
  }
  return args;
}

namespace {
// A wrapper's rule (Note [precision rules]) named and checked against its op's schema, as a
// policy file's would be: the same reader and messages.
std::optional<policy::Rule> imported_rule(const Registration& r, const model::FunctionSchema& schema, DiagnosticEngine& diags) {
  const ImportedRule& imported = r.rule;
  if (imported.dtypes.empty() && imported.modules.empty() && imported.conditions.empty() && imported.casts.empty()) return policy::Rule{};
  const auto located = [&](const std::string& text) { return policy::Located{text, r.location, r.length, false}; };
  const auto name_of = [&](size_t index) -> std::optional<std::string> {
    if (index < schema.arguments().size()) return schema.arguments()[index].name;
    diags.error(r.location, fmt::format("the wrapper of '{}' tests argument {} of {}", schema.name().display(), index + 1,
                                        schema.arguments().size()),
                r.length);
    return std::nullopt;
  };
  policy::PolicyEntry entry{r.policy, located(r.op_text), std::nullopt, std::nullopt, {}, std::nullopt, {}, {}, {}, std::nullopt};
  if (!imported.dtypes.empty()) {
    entry.dtypes.emplace();
    for (const std::string& dtype : imported.dtypes) entry.dtypes->push_back(located(dtype));
  }
  if (!imported.modules.empty()) {
    entry.modules.emplace();
    for (const std::string& pattern : imported.modules) entry.modules->push_back(located(pattern));
  }
  for (const ImportedCondition& c : imported.conditions) {
    const std::optional<std::string> name = name_of(c.index);
    if (!name) return std::nullopt;
    policy::WrittenCondition written{located(*name), {}, r.location};
    for (const std::optional<std::string>& value : c.values)
      written.values.push_back(value ? std::optional(located(*value)) : std::nullopt);
    (c.negated ? entry.unless : entry.when).push_back(std::move(written));
  }
  for (const auto& [index, cast] : imported.casts) {
    const std::optional<std::string> name = name_of(index);
    if (!name) return std::nullopt;
    entry.args.push_back({located(*name), cast, located(std::string(policy::spelling(cast)))});
  }
  return policy::resolve_rule(entry, &schema, diags);
}
}  // namespace

std::optional<std::vector<policy::ResolvedPolicy>> import_registrations(const ImportOptions& options, const model::SchemaSet& schemas,
                                                                       SourceManager& sources, DiagnosticEngine& diags) {
  const size_t errors_before = diags.error_count();
  LocationMapper mapper(sources);
  for (const fs::path& path : options.files) {
    std::string error;
    if (std::optional<uint32_t> file = sources.add_file(path, error)) mapper.add_known(path, *file);
    else diags.error({}, fmt::format("cannot read '{}': {}", path.string(), error));
  }
  if (diags.error_count() != errors_before) return std::nullopt;

  // The compilation database: compile_commands.json, or one fixed command line for every file.
  std::unique_ptr<clang::tooling::CompilationDatabase> database;
  if (!options.build_dir.empty()) {
    std::string error;
    database = clang::tooling::CompilationDatabase::loadFromDirectory(options.build_dir.string(), error);
    if (!database) {
      diags.error({}, fmt::format("cannot load a compilation database from '{}': {}", options.build_dir.string(), error));
      return std::nullopt;
    }
    database = clang::tooling::inferMissingCompileCommands(std::move(database));
  } else {
    std::string why_not;
    std::optional<std::vector<std::string>> args = default_compiler_args(options.torch_dir, why_not);
    if (!args) {
      diags.error({}, fmt::format("cannot find PyTorch's headers to compile the sources with: {}; give a compilation "
                                  "database with -p BUILD_DIR or include directories after --",
                                  why_not));
      return std::nullopt;
    }
    database = std::make_unique<clang::tooling::FixedCompilationDatabase>(".", *args);
  }

  ImportState state{mapper, diags, {}, {}, {}, {}, {}};
  for (const policy::DeviceInfo& d : policy::autocast_devices()) state.autocast_keys.insert(std::string(d.dispatch_key));
  ForwardingConsumer consumer(mapper, diags);

  std::error_code ec;
  for (const fs::path& file : options.files) {
    const fs::path absolute = fs::absolute(file, ec);
    std::vector<clang::tooling::CompileCommand> commands = database->getCompileCommands(absolute.string());
    if (commands.empty()) commands = database->getCompileCommands(file.string());
    if (commands.empty()) {
      diags.error({}, fmt::format("no compile command for '{}' in {}", file.string(), options.build_dir.string()));
      continue;
    }
    const clang::tooling::CompileCommand& command = commands.front();
    clang::tooling::CommandLineArguments args = command.CommandLine;
    args = clang::tooling::getClangStripOutputAdjuster()(args, absolute.string());
    args = clang::tooling::getClangStripDependencyFileAdjuster()(args, absolute.string());
    args = clang::tooling::getClangSyntaxOnlyAdjuster()(args, absolute.string());
    args = without_precompiled_headers(args);  // Note [precompiled headers in compile commands]
    // No warnings (only errors matter), and no caret printing: our engine prints the carets, and
    // without them Clang does not print its "N errors generated" line either.
    std::vector<std::string> extra = {"-w", "-Wno-unknown-warning-option", "-fno-caret-diagnostics"};
    if (const fs::path resource = AUTOCASTGEN_CLANG_RESOURCE_DIR; !resource.empty() && fs::exists(resource, ec))
      extra.push_back("-resource-dir=" + resource.string());
    extra.insert(extra.end(), options.compiler_args.begin(), options.compiler_args.end());
    args = clang::tooling::getInsertArgumentAdjuster(extra, clang::tooling::ArgumentInsertPosition::END)(args, absolute.string());
    // Compile commands name the file as the database has it; ours is what diagnostics print.
    state.directory = command.Directory.empty() ? fs::current_path(ec) : fs::path(command.Directory);
    consumer.set_directory(state.directory);

    llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> fs_view = llvm::vfs::createPhysicalFileSystem();
    fs_view->setCurrentWorkingDirectory(state.directory.string());
    llvm::IntrusiveRefCntPtr<clang::FileManager> files(new clang::FileManager(clang::FileSystemOptions(), fs_view));
    clang::tooling::ToolInvocation invocation(args, std::make_unique<ImportAction>(state), files.get());
    invocation.setDiagnosticConsumer(&consumer);
    if (!invocation.run() && diags.error_count() == errors_before)
      diags.error({}, fmt::format("clang could not process '{}'", file.string()));
  }
  if (diags.error_count() != errors_before) return std::nullopt;

  // Registrations -> one resolved policy per key, checked against the schemas.
  std::unordered_map<std::string, const model::FunctionSchema*> by_ops_struct;
  for (const model::FunctionSchema& s : schemas.schemas())
    if (s.name().is_aten()) by_ops_struct.emplace(emit::torch_unambiguous_name(s.name()), &s);
  std::vector<policy::ResolvedPolicy> snapshots;
  std::map<std::string, size_t> snapshot_of_key;
  std::map<std::pair<std::string, const model::FunctionSchema*>, const Registration*> seen;
  for (const Registration& r : state.registrations) {
    std::string ns = r.block_ns;
    std::string unqualified = r.op_text;
    if (const size_t colons = r.op_text.find("::"); colons != std::string::npos) {
      ns = r.op_text.substr(0, colons);
      unqualified = r.op_text.substr(colons + 2);
      if (r.block_ns != "_" && ns != r.block_ns) {
        diags.error(r.location, fmt::format("'{}' is registered in a TORCH_LIBRARY_IMPL block of namespace '{}'", r.op_text, r.block_ns),
                    r.length);
        continue;
      }
    }
    const model::FunctionSchema* schema = schemas.find(ns, unqualified);
    if (!schema) {
      const std::string base = unqualified.substr(0, unqualified.find('.'));
      const std::string suggestion = closest_match(base, schemas.operator_names(ns));
      diags.error(r.location,
                  fmt::format("unknown op '{}::{}'{}", ns, unqualified,
                              !suggestion.empty()              ? fmt::format("; did you mean '{}'?", suggestion)
                              : ns == model::kDefaultNamespace ? std::string("; if the backend defines it, give its schema file "
                                                                             "with --extra-schemas")
                                                               : std::string("; give its schema file with --extra-schemas")),
                  r.length);
      continue;
    }
    const std::string display = schema->name().display();
    std::string why;
    if (!model::is_autocast_eligible(*schema, &why)) {
      diags.warning(r.location, fmt::format("'{}' cannot autocast in the policy language ({}); left out", display, why), r.length);
      continue;
    }
    const policy::DeviceInfo* device = nullptr;
    for (const policy::DeviceInfo& d : policy::autocast_devices())
      if (d.dispatch_key == r.dispatch_key) device = &d;
    if (!r.kernel_device.empty() && r.kernel_device != emit::torch_device_type(std::string(device->device)))
      diags.warning(r.location,
                    fmt::format("the kernel for '{}' casts for device {} but is registered for {}", display, r.kernel_device, r.dispatch_key),
                    r.length);
    if (r.policy != PolicyKind::fp32_append_dtype && !r.calls_ops.empty() && r.calls_ops != emit::torch_unambiguous_name(schema->name()) &&
        schema->name().is_aten())
      diags.warning(r.location, fmt::format("the kernel registered for '{}' calls at::_ops::{}", display, r.calls_ops), r.length);
    policy::ResolvedEntry entry;
    entry.schema = schema;
    entry.op = display;
    entry.policy = r.policy;
    entry.message = r.message;
    entry.location = r.location;
    entry.length = r.length;
    if (r.policy == PolicyKind::fp32_append_dtype) {
      const model::FunctionSchema* target = nullptr;
      if (!r.redispatch_qualified.empty()) {
        const size_t colons = r.redispatch_qualified.find("::");
        target = schemas.find(r.redispatch_qualified.substr(0, colons), r.redispatch_qualified.substr(colons + 2));
      } else if (auto found = by_ops_struct.find(r.redispatch_ops); found != by_ops_struct.end()) {
        target = found->second;
      }
      if (!target) {
        diags.error(r.location,
                    fmt::format("'{}' redispatches to {}, which is not in the op schemas", display,
                                r.redispatch_qualified.empty() ? "at::_ops::" + r.redispatch_ops : r.redispatch_qualified),
                    r.length);
        continue;
      }
      entry.redispatch = target;
      entry.redispatch_op = target->name().display();
    }
    std::optional<policy::Rule> rule = imported_rule(r, *schema, diags);
    if (!rule) continue;
    entry.rule = std::move(*rule);
    // Entries of one wrapper with precision rules are registered at one place, one after another.
    // A plain entry may end a wrapper's chain after entries scoped to modules (Note [precision by place]).
    const auto after_scoped = [&] {
      const auto slot = snapshot_of_key.find(r.dispatch_key);
      return slot != snapshot_of_key.end() && !snapshots[slot->second].entries.empty() &&
             snapshots[slot->second].entries.back().schema == schema && !snapshots[slot->second].entries.back().rule.modules.empty();
    };
    if (auto [it, inserted] = seen.emplace(std::make_pair(r.dispatch_key, schema), &r); !inserted &&
        !(it->second->location.offset == r.location.offset && it->second->location.file == r.location.file &&
          (entry.rule.conditional() || after_scoped()))) {
      diags.error(r.location, fmt::format("'{}' is registered twice for {}", display, r.dispatch_key), r.length);
      diags.note(it->second->location, "first registered here", it->second->length);
      continue;
    }
    auto [slot, added] = snapshot_of_key.emplace(r.dispatch_key, snapshots.size());
    if (added) {
      policy::ResolvedPolicy s;
      s.source = policy::PolicySource::cpp;
      s.dispatch_key = r.dispatch_key;
      s.device = std::string(device->device);
      snapshots.push_back(std::move(s));
    }
    snapshots[slot->second].entries.push_back(std::move(entry));
  }
  // A block that registers nothing (or only fallthroughs) is an empty policy, said where it is.
  std::set<std::string> registering;  // keys with entries
  for (const auto& [key, index] : snapshot_of_key) registering.insert(key);
  for (const FoundBlock& block : state.blocks) {
    if (block.kernels > 0 || registering.count(block.dispatch_key)) continue;
    diags.note(block.location, block.fallthroughs == 0
                                   ? fmt::format("this TORCH_LIBRARY_IMPL block for {} registers no kernels; imported as an empty policy",
                                                 block.dispatch_key)
                                   : fmt::format("this TORCH_LIBRARY_IMPL block for {} registers only fallthroughs ({}), which leave "
                                                 "their ops unlisted; imported as an empty policy",
                                                 block.dispatch_key, block.fallthroughs));
    if (snapshot_of_key.emplace(block.dispatch_key, snapshots.size()).second) {
      policy::ResolvedPolicy s;
      s.source = policy::PolicySource::cpp;
      s.dispatch_key = block.dispatch_key;
      for (const policy::DeviceInfo& d : policy::autocast_devices())
        if (d.dispatch_key == block.dispatch_key) s.device = std::string(d.device);
      snapshots.push_back(std::move(s));
    }
  }
  // Note [precision by place]: a section belongs to the policy of its device.
  for (ImportedSections& imported : state.sections) {
    const auto policy = std::find_if(snapshots.begin(), snapshots.end(), [&](const policy::ResolvedPolicy& p) {
      return emit::torch_device_type(p.device) == imported.device_type;
    });
    if (policy == snapshots.end()) {
      diags.warning(imported.location,
                    fmt::format("a module section for device {}, which no autocast registration here is for; left out", imported.device_type));
    } else if (!policy->sections.empty() && policy->sections != imported.sections) {
      diags.error(imported.location, fmt::format("a second, different module section for {}", policy->dispatch_key));
    } else {
      policy->sections = std::move(imported.sections);
    }
  }
  if (diags.error_count() != errors_before) return std::nullopt;
  return snapshots;
}

}  // namespace autocastgen::import

extern "C" __attribute__((visibility("default"))) const autocastgen::import::ImporterApi* autocastgen_importer_api() {
  static const autocastgen::import::ImporterApi api{&autocastgen::import::import_registrations};
  return &api;
}
