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
#if AUTOCASTGEN_HAVE_IMPORTER
#include "import/plugin.h"
#endif

namespace autocastgen::cli {

namespace {

namespace fs = std::filesystem;

struct CoverageOptions {
  fs::path policy;
  std::vector<fs::path> schemas;
  std::string torch_version;
  std::string format = "md";
};

struct DiffOptions {
  fs::path a;
  fs::path b;
  std::vector<fs::path> schemas;
  std::vector<std::string> torch_versions;
  std::vector<std::string> keys;
  fs::path build_dir;
  std::string format = "md";
  std::vector<std::string> fail_on;
};

int finish_with_errors(const DiagnosticEngine& diags) {
  std::cerr << fmt::format("autocastgen: {} error{}; no report written\n", diags.error_count(), diags.error_count() == 1 ? "" : "s");
  return 1;
}

std::vector<std::string> schema_names(const SourceManager& sources, const std::vector<uint32_t>& files) {
  std::vector<std::string> names;
  for (uint32_t f : files) names.push_back(display_path(sources.name(f)));
  return names;
}

int run_coverage(const CoverageOptions& options) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  std::optional<SchemaInputs> inputs = load_schema_inputs(options.schemas, options.torch_version, sources, diags);
  if (!inputs) return finish_with_errors(diags);
  const model::SchemaSet* schemas = &inputs->schemas;
  const std::vector<uint32_t>& schema_files = inputs->files;
  std::optional<policy::ResolvedPolicy> resolved = policy::load_policy(options.policy, *schemas, sources, diags, inputs->target());
  if (!resolved || diags.has_errors()) return finish_with_errors(diags);
  resolved->name = display_path(options.policy);
  const audit::CoverageReport report = audit::compute_coverage(*resolved, *schemas, schema_names(sources, schema_files));
  if (options.format == "json") std::cout << audit::coverage_json(report, sources).dump(2) << "\n";
  else std::cout << audit::coverage_markdown(report, sources);
  return 0;
}

// Reads one side of a diff, whatever kind of file it is.
std::optional<policy::ResolvedPolicy> read_side(const fs::path& path, const std::string& key, const DiffOptions& options,
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
      std::optional<uint32_t> file = read_input(path, sources, diags);
      if (!file) return std::nullopt;
      return audit::read_manifest(*file, display_path(path), schemas, sources, diags);
    }
    case policy::PolicySource::cpp: {
#if AUTOCASTGEN_HAVE_IMPORTER
      import::ImportOptions import_options;
      import_options.files = {path};
      import_options.build_dir = options.build_dir;
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
        diags.error({}, fmt::format("'{}' registers no autocast kernels", path.string()));
      else if (key.empty())
        diags.error({}, fmt::format("'{}' registers kernels for several dispatch keys ({}); pick one with --key", path.string(),
                                    fmt::join(keys, ", ")));
      else
        diags.error({}, fmt::format("'{}' registers nothing for {} (it registers for {})", path.string(), key, fmt::join(keys, ", ")));
      return std::nullopt;
#else
      (void)key;
      (void)options;
      diags.error({}, fmt::format("'{}' is C++, and this autocastgen was built without the importer (Clang's development "
                                  "packages were not found, or -DAUTOCASTGEN_IMPORTER=OFF); diff policies or manifests instead",
                                  path.string()));
      return std::nullopt;
#endif
    }
  }
  return std::nullopt;
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
  std::optional<SchemaInputs> inputs_a = load_schema_inputs(
      options.schemas.empty() ? std::vector<fs::path>{} : std::vector<fs::path>{options.schemas.front()},
      side(options.torch_versions, false), sources, diags);
  if (!inputs_a) return finish_with_errors(diags);
  std::optional<SchemaInputs> inputs_b;
  if (options.schemas.size() == 2 || options.torch_versions.size() == 2) {
    inputs_b = load_schema_inputs(options.schemas.empty() ? std::vector<fs::path>{} : std::vector<fs::path>{options.schemas.back()},
                                  side(options.torch_versions, true), sources, diags);
    if (!inputs_b) return finish_with_errors(diags);
  }
  const SchemaInputs& in_b = inputs_b ? *inputs_b : *inputs_a;
  const model::SchemaSet* schemas_a = &inputs_a->schemas;
  const model::SchemaSet& sb = in_b.schemas;
  const std::string key_a = options.keys.empty() ? "" : options.keys.front();
  const std::string key_b = options.keys.empty() ? "" : options.keys.back();
  // Both sides are read even when the first fails, so one run reports every problem.
  std::optional<policy::ResolvedPolicy> a = read_side(options.a, key_a, options, *inputs_a, sources, diags);
  std::optional<policy::ResolvedPolicy> b = read_side(options.b, key_b, options, in_b, sources, diags);
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
  cov->add_option("--policy", coverage->policy, "Policy YAML file")->required();
  add_schema_options(*cov, coverage->schemas, coverage->torch_version);
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
  dif->add_option("-p,--build-dir", diff->build_dir, "compile_commands.json directory for C++ inputs")->check(CLI::ExistingDirectory);
  dif->add_option("--format", diff->format, "md (Markdown) or json")->check(CLI::IsMember({"md", "json"}))->default_val("md");
  dif->add_option("--fail-on", diff->fail_on, "Exit with status 2 when any of these categories is not empty")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"added", "removed", "changed"}));

  return [cov, coverage, diff] { return cov->parsed() ? run_coverage(*coverage) : run_diff(*diff); };
}

}  // namespace autocastgen::cli
