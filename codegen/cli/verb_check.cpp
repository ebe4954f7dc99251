// `autocastgen check`: loads schemas and a policy, reports every problem, prints a summary or JSON.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "emit/policy_json.h"

#include "cli/inputs.h"
#include "cli/verbs.h"
#include "policy/resolver.h"
#include "support/strings.h"

namespace autocastgen::cli {

namespace {

struct CheckOptions {
  std::filesystem::path policy;
  std::vector<std::filesystem::path> schemas;
  std::string torch_version;
  std::string format = "text";
  bool files = false;
};

// `check --files`: the policy's `extends:` chain only (Note [the files a chain read] in
// policy/resolver.cpp), each file read by its absolute path and a NUL byte, so any file name.
int print_chain_files(const std::filesystem::path& policy) {
  SourceManager sources;
  DiagnosticEngine diags(sources, std::cerr);
  std::vector<std::filesystem::path> read;
  if (!policy::load_policy_chain(policy, sources, diags, &read) || diags.has_errors()) {
    std::cerr << fmt::format("{}: {} generated.\n", terminal_text(policy.string()), diags.error_summary());
    return 1;
  }
  for (const std::filesystem::path& file : read) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(file, ec);
    std::cout << (ec ? file : absolute).string() << '\0';
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}

nlohmann::ordered_json to_json(const policy::ResolvedPolicy& resolved, const SourceManager& sources) {
  nlohmann::ordered_json out;
  out["policy"] = sources.name(resolved.files.front());
  out["torch_version"] = resolved.torch_version ? nlohmann::ordered_json(resolved.torch_version->str()) : nlohmann::ordered_json();
  out["device"] = resolved.device;
  out["dispatch_key"] = resolved.dispatch_key;
  out["lower_precision"] = resolved.lower_precision;
  if (resolved.fp8) out["fp8"] = emit::fp8_recipe_json(*resolved.fp8);
  if (!resolved.sections.empty()) out["modules"] = emit::sections_json(resolved.sections);  // Note [precision by place]
  out["files"] = nlohmann::ordered_json::array();
  for (uint32_t file : resolved.files) out["files"].push_back(sources.name(file));
  out["counts"] = emit::counts_json(resolved);
  out["entries"] = nlohmann::ordered_json::array();
  for (const policy::ResolvedEntry& entry : resolved.entries) {
    nlohmann::ordered_json e = emit::entry_json(entry);
    e["source"] = sources.location_text(entry.location);
    out["entries"].push_back(std::move(e));
  }
  // Note [release gates]: what the target release left out, and why.
  out["skipped"] = nlohmann::ordered_json::array();
  for (const policy::SkippedEntry& skipped : resolved.skipped) {
    nlohmann::ordered_json e;
    e["op"] = skipped.op;
    e["list"] = skipped.policy ? std::string(policy::spelling(*skipped.policy)) : std::string("remove");
    if (skipped.gate.since) e["since"] = skipped.gate.since->str();
    if (skipped.gate.until) e["until"] = skipped.gate.until->str();
    e["reason"] = skipped.reason;
    e["source"] = sources.location_text(skipped.location);
    out["skipped"].push_back(std::move(e));
  }
  return out;
}

std::string summary(const policy::ResolvedPolicy& resolved, const SourceManager& sources) {
  std::vector<std::string> counts;
  for (policy::PolicyKind kind : resolved.reported_kinds()) counts.push_back(fmt::format("{} {}", resolved.count(kind), policy::spelling(kind)));
  const std::string release = resolved.torch_version ? " for PyTorch " + resolved.torch_version->str() : "";
  const std::string skipped = resolved.skipped.empty() ? "" : fmt::format(" ({} entries skipped by release gates)", resolved.skipped.size());
  const size_t overloads = resolved.overload_count();
  const std::string entries = overloads == resolved.entries.size() ? "" : fmt::format(" ({} entries)", resolved.entries.size());
  // Note [precision by place]: said only when the policy has module rules.
  const size_t scoped = static_cast<size_t>(std::count_if(resolved.entries.begin(), resolved.entries.end(),
                                                          [](const policy::ResolvedEntry& e) { return !e.rule.modules.empty(); }));
  std::string modules;
  if (scoped) modules += fmt::format("; {} {} scoped to modules", scoped, scoped == 1 ? "entry" : "entries");
  if (!resolved.sections.empty()) modules += fmt::format("; modules: {}", policy::sections_str(resolved.sections));
  return fmt::format("{}: ok{}: device {} ({}, lower precision {}): {}; {} overloads{}{}{}\n", sources.name(resolved.files.front()),
                     release, resolved.device, resolved.dispatch_key, fmt::join(resolved.lower_precision, "/"),
                     fmt::join(counts, ", "), overloads, entries, skipped, modules);
}

}  // namespace

VerbRunner add_check_verb(CLI::App& app) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* verb = app.add_subcommand("check", "Check a policy against the op schemas and summarise it");
  verb->add_option("--policy", options->policy, "Policy YAML file")->required();
  add_schema_options(*verb, options->schemas, options->torch_version);
  verb->add_option("--format", options->format, "text: a one-line summary; json: the full resolved list")
      ->check(CLI::IsMember({"text", "json"}));
  verb->add_flag("--files", options->files,
                 "Only read the policy and the files its 'extends:' chain names (no schemas) and print each one's absolute "
                 "path followed by a NUL byte")
      ->excludes("--schemas")
      ->excludes("--torch-version")
      ->excludes("--format");
  return [options] {
    if (options->files) return print_chain_files(options->policy);
    SourceManager sources;
    DiagnosticEngine diags(sources, std::cerr);
    std::optional<SchemaInputs> inputs = load_schema_inputs(options->schemas, options->torch_version, sources, diags);
    if (!inputs) return 1;
    std::optional<policy::ResolvedPolicy> resolved =
        policy::load_policy(options->policy, inputs->schemas, sources, diags, inputs->target());
    if (!resolved || diags.has_errors()) {
      std::cerr << fmt::format("{}: {} generated.\n", terminal_text(options->policy.string()), diags.error_summary());
      return 1;
    }
    if (options->format == "json") std::cout << to_json(*resolved, sources).dump(2) << "\n";
    else std::cout << summary(*resolved, sources);
    return 0;
  };
}

}  // namespace autocastgen::cli
