// `autocastgen import`: C++ autocast registrations -> one policy YAML per dispatch key.
#include <iostream>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "cli/inputs.h"
#include "cli/verbs.h"
#include "support/paths.h"
#include "emit/output_writer.h"
#include "audit/diff.h"
#include "audit/inputs.h"
#include "cli/build_config.h"
#include "import/plugin.h"
#include "import/policy_writer.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

struct ImportVerbOptions {
  std::vector<std::string> files;
  std::vector<std::string> compiler_args;  // after `--`
  fs::path build_dir;
  fs::path out = ".";
  std::vector<fs::path> schemas;
  std::vector<fs::path> extra_schemas;
  std::string torch_version;
};

// The schema files besides a PyTorch release's own that the policy's ops come from: what `check`,
// `generate` and `audit` need to read it, which the written policy names in its header.
std::vector<std::string> schema_files_needed(const policy::ResolvedPolicy& imported, const SchemaInputs& inputs,
                                             const SourceManager& sources) {
  std::set<uint32_t> used;
  for (const policy::ResolvedEntry& e : imported.entries) {
    if (e.schema) used.insert(e.schema->location().file);
    if (e.redispatch) used.insert(e.redispatch->location().file);
  }
  std::vector<std::string> names;
  for (uint32_t file : inputs.files)
    if (used.count(file) && !release_of_schema_file(sources.name(file))) names.push_back(display_path(sources.name(file)));
  return names;
}

// Without the importer plugin: what to do instead.
int refuse_without_importer() {
  if (kPipPackage)
    std::cerr << "autocastgen: error: 'import' needs the Clang importer, which the pip package leaves out: run it from a "
                 "CMake build of the clone (scripts/setup installs Clang 14's development packages; then cmake --preset "
                 "default && cmake --build --preset default && build/bin/autocastgen import ...)\n";
  else
    std::cerr << "autocastgen: error: this autocastgen was built without the importer: Clang's development packages "
                 "(libclang-14-dev, libclang-cpp14-dev, llvm-14-dev) were not found when it was configured, or it was "
                 "configured with -DAUTOCASTGEN_IMPORTER=OFF. Install them (scripts/setup) and rebuild to use "
                 "'autocastgen import'.\n";
  return 1;
}

int run(const ImportVerbOptions& options) {
  if (!kHaveImporter) return refuse_without_importer();
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  import::ImportOptions import_options;
  import_options.build_dir = options.build_dir;
  import_options.files.assign(options.files.begin(), options.files.end());
  import_options.compiler_args = options.compiler_args;
  if (import_options.files.empty()) {
    diags.error({}, "no C++ files to import");
    return 1;
  }
  std::optional<SchemaInputs> inputs =
      load_schema_inputs(options.schemas, options.torch_version, sources, diags, options.extra_schemas);
  if (!inputs) return 1;
  import_options.torch_dir = inputs->release_dir;
  const model::SchemaSet* schemas = &inputs->schemas;
  const import::ImporterApi* importer = import::load_importer(diags);
  if (!importer) return 1;
  std::optional<std::vector<policy::ResolvedPolicy>> imported =
      importer->run(import_options, *schemas, sources, diags);
  if (!imported) {
    std::cerr << fmt::format("autocastgen: import: {}; nothing written\n", diags.error_summary());
    return 1;
  }
  if (imported->empty()) {
    // The importer warns about each kernel it leaves out; with none kept, say which case this is.
    diags.error({}, diags.warning_count() > 0
                        ? fmt::format("none of the kernels registered for an autocast dispatch key is a list policy: all were "
                                      "left out ({} warning{} above); nothing to import",
                                      diags.warning_count(), diags.warning_count() == 1 ? "" : "s")
                        : std::string("the sources have no block for an autocast dispatch key (TORCH_LIBRARY_IMPL(<ns>, "
                                      "Autocast<X>, m)); nothing to import"));
    return 1;
  }
  std::vector<std::string> names;
  for (const fs::path& f : import_options.files) names.push_back(display_path(f));
  emit::OutputWriter writer(options.out);
  for (const policy::ResolvedPolicy& imported_policy : *imported) {
    std::string text = import::policy_yaml(imported_policy, names, schema_files_needed(imported_policy, *inputs, sources),
                                           inputs->release_dir.empty() ? std::string() : inputs->torch_version->str());
    // The written policy must load back to the same entries: resolve it before writing.
    const std::string path = imported_policy.device + ".yaml";
    const uint32_t buffer = sources.add_buffer((options.out / path).string(), text);
    std::optional<policy::PolicyFile> parsed = policy::parse_policy_file(sources, buffer, diags);
    std::optional<policy::ResolvedPolicy> resolved =
        parsed ? policy::resolve_policy({*parsed}, *schemas, diags, inputs->target()) : std::nullopt;
    const policy::ResolvedPolicy back = resolved ? *resolved : policy::ResolvedPolicy{};
    const audit::PolicyDiff diff = audit::diff_policies({&imported_policy, &*schemas}, {&back, &*schemas});
    if (!resolved || !diff.added.empty() || !diff.removed.empty() || !diff.changed.empty())
      diags.error({}, fmt::format("the policy imported for {} does not load back to what was imported (a bug in the importer)",
                                  imported_policy.dispatch_key));
    writer.add(path, std::move(text), diags);
  }
  if (diags.has_errors()) return 1;
  for (const std::string& path : writer.write(diags)) std::cout << "wrote " << path << "\n";
  for (const policy::ResolvedPolicy& imported_policy : *imported) {
    std::vector<std::string> counts;
    for (policy::PolicyKind kind : policy::kAllPolicies)
      if (imported_policy.count(kind)) counts.push_back(fmt::format("{} {}", imported_policy.count(kind), policy::spelling(kind)));
    const size_t overloads = imported_policy.overload_count();
    const std::string entries =
        overloads == imported_policy.entries.size() ? "" : fmt::format(", {} entries", imported_policy.entries.size());
    if (overloads == 0) std::cout << fmt::format("{}: 0 overloads (an empty registration block)\n", imported_policy.dispatch_key);
    else std::cout << fmt::format("{}: {} overloads ({}{})\n", imported_policy.dispatch_key, overloads, fmt::join(counts, ", "), entries);
  }
  return diags.has_errors() ? 1 : 0;
}

}  // namespace

VerbRunner add_import_verb(CLI::App& app) {
  auto options = std::make_shared<ImportVerbOptions>();
  CLI::App* verb = app.add_subcommand("import", "Read C++ autocast registrations (KERNEL_* helpers, generated files) into policy YAML");
  // CLI11 hands `--` to the parent command unless a positional still wants values, and fills
  // positionals in order: so `files` takes words until the first one starting with '-' (which can
  // only come after `--`), and `compiler_args` (which wants one) takes that word and the rest.
  struct Split {
    bool compiler = false;
    std::set<std::string> files;
  };
  auto split = std::make_shared<Split>();
  verb->add_option("files", options->files, "C++ files that register autocast kernels")
      ->required()
      ->check(CLI::Validator(
          [split](std::string& word) -> std::string {
            if (split->files.count(word)) return "";  // validated again after parsing
            if (split->compiler || word.starts_with("-")) {
              split->compiler = true;
              return "a compiler argument";
            }
            split->files.insert(word);
            return "";
          },
          "FILE"));
  verb->add_option("compiler_args", options->compiler_args, "After `--`: extra compiler arguments")->expected(1, -1);
  verb->validate_positionals();
  verb->add_option("-p,--build-dir", options->build_dir, "Directory of compile_commands.json; default: compile with the installed PyTorch's headers")
      ->check(CLI::ExistingDirectory);
  verb->add_option("-o,--out", options->out, "Output directory for <device>.yaml files")->default_val(".");
  add_schema_options(*verb, options->schemas, options->torch_version);
  add_extra_schemas_option(*verb, options->extra_schemas);
  verb->footer("Everything after `--` is passed to the compiler, e.g. -- -DMY_BACKEND -I/opt/backend/include");
  return [options] { return run(*options); };
}

}  // namespace autocastgen::cli
