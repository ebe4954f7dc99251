// `autocastgen audit coverage|diff`: coverage of a policy, and policy diffs across inputs.
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "audit/coverage.h"
#include "audit/diff.h"
#include "audit/inputs.h"
#include "cli/inputs.h"
#include "cli/verbs.h"
#include "support/paths.h"
#include "policy/resolver.h"
#include "cli/build_config.h"
#include "import/plugin.h"

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

// How both verbs read C++ inputs (with the importer, as `import` does).
struct CppOptions {
  fs::path build_dir;                      // -p
  std::vector<std::string> compiler_args;  // after `--`
};

struct CoverageOptions {
  fs::path policy;
  std::vector<fs::path> schemas;
  std::vector<fs::path> extra_schemas;
  std::string torch_version;
  std::string key;
  CppOptions cpp;
  std::string format = "md";
};

struct DiffOptions {
  fs::path a;
  fs::path b;
  std::vector<fs::path> schemas;
  std::vector<fs::path> extra_schemas;
  std::vector<std::string> torch_versions;
  std::vector<std::string> keys;
  CppOptions cpp;
  std::string format = "md";
  std::vector<std::string> fail_on;
};

int finish_with_errors(const DiagnosticEngine& diags) {
  std::cerr << fmt::format("autocastgen: {}; no report written\n", diags.error_summary());
  return 1;
}

std::vector<std::string> schema_names(const SourceManager& sources, const std::vector<uint32_t>& files) {
  std::vector<std::string> names;
  for (uint32_t f : files) names.push_back(display_path(sources.name(f)));
  return names;
}

// Adds `-p` and the compiler arguments after `--` (C++ inputs) to a verb. CLI11 gives the words
// after `--` to a positional that still wants values: `compiler_args`, after the verb's own
// positionals. A word there that does not start with '-' before any that does was not after `--`.
void add_cpp_options(CLI::App& verb, CppOptions& cpp) {
  verb.add_option("-p,--build-dir", cpp.build_dir, "compile_commands.json directory for C++ inputs")->check(CLI::ExistingDirectory);
  auto started = std::make_shared<bool>(false);
  verb.add_option("compiler_args", cpp.compiler_args, "After `--`: compiler arguments for C++ inputs")
      ->expected(1, -1)
      ->check(CLI::Validator(
          [started](std::string& word) -> std::string {
            if (!*started && !word.starts_with("-")) return "an extra input; compiler arguments for C++ inputs go after `--`";
            *started = true;
            return "";
          },
          "ARGS"));
  verb.footer("Everything after `--` is passed to the compiler for C++ inputs, e.g. -- -DMY_BACKEND -I/opt/backend/include");
}

// -p and `-- ARGS` name how C++ inputs compile: given for none, they would be ignored.
void warn_unused_cpp_options(const CppOptions& cpp, const std::vector<fs::path>& inputs, DiagnosticEngine& diags) {
  if (cpp.build_dir.empty() && cpp.compiler_args.empty()) return;
  for (const fs::path& input : inputs)
    if (audit::input_kind(input) == policy::PolicySource::cpp) return;
  diags.warning({}, fmt::format("{} given, but no input is C++: {} only how C++ inputs compile",
                                cpp.build_dir.empty() ? "compiler arguments after `--` are" : "-p is",
                                cpp.build_dir.empty() ? "they say" : "it says"));
}

// Reads a policy, a manifest or C++ registrations (one dispatch key: `key`, or the only one).
std::optional<policy::ResolvedPolicy> read_input_policy(const fs::path& path, const std::string& key, const CppOptions& cpp,
                                                       const SchemaInputs& inputs, SourceManager& sources, DiagnosticEngine& diags) {
  const model::SchemaSet& schemas = inputs.schemas;
  const std::optional<policy::PolicySource> kind = audit::input_kind(path);
  if (!kind) {
    std::optional<uint32_t> file = read_input(path, sources, diags);
    if (!file) return std::nullopt;
    diags.error(sources.start_of(*file),
                fmt::format("cannot tell what kind of input '{}' is from its extension: expected a policy (.yaml, .yml), a "
                            "manifest from 'autocastgen generate' (.json) or C++ registrations (.cpp, .cc, .cxx, .cu, .h, .hpp)",
                            path.string()));
    return std::nullopt;
  }
  switch (*kind) {
    case policy::PolicySource::policy_file: {
      std::optional<policy::ResolvedPolicy> resolved = policy::load_policy(path, schemas, sources, diags, inputs.target());
      if (!resolved) return std::nullopt;
      resolved->name = display_path(path);
      return resolved;
    }
    case policy::PolicySource::manifest: {
      std::optional<uint32_t> file = read_input(path, sources, diags, kMaxRecordFileBytes, "manifests");
      if (!file) return std::nullopt;
      return audit::read_manifest(*file, display_path(path), schemas, sources, diags);
    }
    case policy::PolicySource::cpp: {
      if (!kHaveImporter) {
        diags.error({}, fmt::format("'{}' is C++, and this autocastgen was built without the importer (Clang's development "
                                    "packages were not found, or -DAUTOCASTGEN_IMPORTER=OFF); diff policies or manifests "
                                    "instead",
                                    path.string()));
        return std::nullopt;
      }
      import::ImportOptions import_options;
      import_options.files = {path};
      import_options.build_dir = cpp.build_dir;
      import_options.compiler_args = cpp.compiler_args;
      import_options.torch_dir = inputs.release_dir;
      const import::ImporterApi* importer = import::load_importer(diags);
      if (!importer) return std::nullopt;
      std::optional<std::vector<policy::ResolvedPolicy>> imported =
          importer->run(import_options, schemas, sources, diags);
      if (!imported) return std::nullopt;
      std::vector<std::string> keys;
      for (policy::ResolvedPolicy& s : *imported) {
        keys.push_back(s.dispatch_key);
        if (s.dispatch_key == key || (key.empty() && imported->size() == 1)) {
          s.name = display_path(path) + (key.empty() ? "" : " [" + key + "]");
          return std::move(s);
        }
      }
      if (imported->empty())
        diags.error({}, fmt::format("'{}' has no block for an autocast dispatch key (TORCH_LIBRARY_IMPL(<ns>, Autocast<X>, m)), or "
                                    "none of its kernels is a list policy (warnings above)",
                                    path.string()));
      else if (key.empty())
        diags.error({}, fmt::format("'{}' registers kernels for several dispatch keys ({}); pick one with --key", path.string(),
                                    fmt::join(keys, ", ")));
      else
        diags.error({}, fmt::format("'{}' registers nothing for {} (it registers for {})", path.string(), key, fmt::join(keys, ", ")));
      return std::nullopt;
    }
  }
  return std::nullopt;
}

int run_coverage(const CoverageOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  warn_unused_cpp_options(options.cpp, {options.policy}, diags);
  std::optional<SchemaInputs> inputs =
      load_schema_inputs(options.schemas, options.torch_version, sources, diags, options.extra_schemas);
  if (!inputs) return finish_with_errors(diags);
  std::optional<policy::ResolvedPolicy> resolved = read_input_policy(options.policy, options.key, options.cpp, *inputs, sources, diags);
  if (!resolved || diags.has_errors()) return finish_with_errors(diags);
  const audit::CoverageReport report = audit::compute_coverage(*resolved, inputs->schemas, schema_names(sources, inputs->files));
  if (options.format == "json") std::cout << audit::coverage_json(report, sources).dump(2) << "\n";
  else std::cout << audit::coverage_markdown(report, sources);
  return 0;
}

int run_diff(const DiffOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  if (options.schemas.size() > 2 || options.keys.size() > 2 || options.torch_versions.size() > 2) {
    diags.error({}, fmt::format("--{} may be given once (for both inputs) or twice (for A, then B)",
                                options.schemas.size() > 2 ? "schemas" : options.keys.size() > 2 ? "key" : "torch-version"));
    return finish_with_errors(diags);
  }
  auto side = [](const auto& values, bool second) {
    using Value = typename std::decay_t<decltype(values)>::value_type;
    return values.empty() ? Value{} : second ? values.back() : values.front();
  };
  warn_unused_cpp_options(options.cpp, {options.a, options.b}, diags);
  std::optional<SchemaInputs> inputs_a = load_schema_inputs(
      options.schemas.empty() ? std::vector<fs::path>{} : std::vector<fs::path>{options.schemas.front()},
      side(options.torch_versions, false), sources, diags, options.extra_schemas);
  if (!inputs_a) return finish_with_errors(diags);
  std::optional<SchemaInputs> inputs_b;
  if (options.schemas.size() == 2 || options.torch_versions.size() == 2) {
    inputs_b = load_schema_inputs(options.schemas.empty() ? std::vector<fs::path>{} : std::vector<fs::path>{options.schemas.back()},
                                  side(options.torch_versions, true), sources, diags, options.extra_schemas);
    if (!inputs_b) return finish_with_errors(diags);
  }
  const SchemaInputs& in_b = inputs_b ? *inputs_b : *inputs_a;
  const model::SchemaSet* schemas_a = &inputs_a->schemas;
  const model::SchemaSet& sb = in_b.schemas;
  const std::string key_a = options.keys.empty() ? "" : options.keys.front();
  const std::string key_b = options.keys.empty() ? "" : options.keys.back();
  // Both sides are read even when the first fails, so one run reports every problem.
  std::optional<policy::ResolvedPolicy> a = read_input_policy(options.a, key_a, options.cpp, *inputs_a, sources, diags);
  std::optional<policy::ResolvedPolicy> b = read_input_policy(options.b, key_b, options.cpp, in_b, sources, diags);
  if (!a || !b || diags.has_errors()) return finish_with_errors(diags);

  const audit::PolicyDiff diff = audit::diff_policies({&*a, &*schemas_a}, {&*b, &sb});
  if (options.format == "json") std::cout << audit::diff_json(diff, *a, *b).dump(2) << "\n";
  else std::cout << audit::diff_markdown(diff, *a, *b);
  std::vector<std::string> failing;
  for (const std::string& category : options.fail_on) {
    const audit::DiffCategory c = category == "added"     ? audit::DiffCategory::added
                                  : category == "removed" ? audit::DiffCategory::removed
                                                          : audit::DiffCategory::changed;
    if (audit::has_changes(diff, c)) failing.push_back(category);
  }
  if (!failing.empty()) {
    std::cerr << fmt::format("autocastgen: audit diff: {} (--fail-on {})\n", fmt::join(failing, ", "), fmt::join(options.fail_on, ","));
    return 2;
  }
  return 0;
}

}  // namespace

VerbRunner add_audit_verb(CLI::App& app) {
  CLI::App* verb = app.add_subcommand("audit", "Coverage reports and policy diffs for review");
  verb->require_subcommand(1);

  auto coverage = std::make_shared<CoverageOptions>();
  CLI::App* cov = verb->add_subcommand("coverage", "Counts, every listed overload, and the eligible ops no list covers, by family");
  cov->add_option("--policy", coverage->policy, "A policy (.yaml), a manifest (.json) or C++ registrations")->required();
  add_schema_options(*cov, coverage->schemas, coverage->torch_version);
  add_extra_schemas_option(*cov, coverage->extra_schemas);
  cov->add_option("--key", coverage->key, "For C++ registering several keys: the dispatch key to report");
  add_cpp_options(*cov, coverage->cpp);
  cov->add_option("--format", coverage->format, "md (Markdown) or json")->check(CLI::IsMember({"md", "json"}))->default_val("md");

  auto diff = std::make_shared<DiffOptions>();
  CLI::App* dif = verb->add_subcommand("diff", "Ops added, removed and changed from A to B (policies, manifests or C++)");
  dif->add_option("A", diff->a, "The old side: a policy (.yaml), a manifest (.json) or C++ registrations")->required();
  dif->add_option("B", diff->b, "The new side")->required();
  dif->add_option("--schemas", diff->schemas, "Op-schema file: once for both sides, or twice (A's, then B's)")
      ->check(CLI::ExistingFile)
      ->allow_extra_args(false);
  dif->add_option("--torch-version", diff->torch_versions,
                  "The PyTorch release of the schemas: once for both sides, or twice (A's, then B's); default: found beside "
                  "each schema file, else the installed torch's")
      ->allow_extra_args(false);
  dif->add_option("--key", diff->keys, "For C++ inputs registering several keys: the dispatch key to compare (once, or A's then B's)")
      ->allow_extra_args(false);
  add_extra_schemas_option(*dif, diff->extra_schemas);
  add_cpp_options(*dif, diff->cpp);
  dif->add_option("--format", diff->format, "md (Markdown) or json")->check(CLI::IsMember({"md", "json"}))->default_val("md");
  dif->add_option("--fail-on", diff->fail_on, "Exit with status 2 when any of these categories is not empty")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"added", "removed", "changed"}));

  return [cov, coverage, diff] { return cov->parsed() ? run_coverage(*coverage) : run_diff(*diff); };
}

}  // namespace autocastgen::cli
