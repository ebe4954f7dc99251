// The C++ importer's driver: what each file compiles with, a Clang run over each (import/
// registration_reader.h), and what they register turned into policies (import/
// policies_from_registrations.h); the plugin's entry point. Note [what the importer recognises]
// in import/kernel_reader.cpp says which kernels it reads.
#include "import/importer.h"
#include "import/clang_support.h"
#include "import/compile_command.h"
#include "import/plugin.h"
#include "import/policies_from_registrations.h"
#include "import/registration_reader.h"

#include <cstdlib>
#include <memory>
#include <utility>

#include <clang/Basic/FileManager.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Tooling/ArgumentsAdjusters.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <fmt/format.h>

#include "host/python.h"

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

std::optional<std::vector<policy::ResolvedPolicy>> import_registrations(const ImportOptions& options, const model::SchemaSet& schemas,
                                                                       SourceManager& sources, DiagnosticEngine& diags) {
  const size_t errors_before = diags.error_count();
  detail::LocationMapper mapper(sources);
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

  detail::ImportState state{mapper, diags, {}, {}, {}, {}, {}};
  for (const policy::DeviceInfo& d : policy::autocast_devices()) state.autocast_keys.insert(std::string(d.dispatch_key));
  detail::ForwardingConsumer consumer(mapper, diags);

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
    clang::tooling::ToolInvocation invocation(args, detail::import_action(state), files.get());
    invocation.setDiagnosticConsumer(&consumer);
    if (!invocation.run() && diags.error_count() == errors_before)
      diags.error({}, fmt::format("clang could not process '{}'", file.string()));
  }
  if (diags.error_count() != errors_before) return std::nullopt;

  // Registrations -> one resolved policy per key, checked against the schemas.
  std::vector<policy::ResolvedPolicy> snapshots =
      detail::policies_from_registrations(state.registrations, state.blocks, std::move(state.sections), schemas, diags);
  if (diags.error_count() != errors_before) return std::nullopt;
  return snapshots;
}

}  // namespace autocastgen::import

extern "C" __attribute__((visibility("default"))) const autocastgen::import::ImporterApi* autocastgen_importer_api() {
  static const autocastgen::import::ImporterApi api{&autocastgen::import::import_registrations};
  return &api;
}
