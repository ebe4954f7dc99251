// Turns a policy file and the files it extends into a ResolvedPolicy checked against the schemas.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/op_history.h"
#include "model/schema_set.h"
#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::policy {

// Reads `path` and, following `extends:` (relative to the including file), every base file.
// Returns the chain with the requested file first. Reports missing files, cycles and a chain of
// more than 64 files. `read`, when given, receives the path of every file read, as opened (how
// diagnostics name it), in chain order: also when an error stops the chain, up to the file that
// had it (a file that could not be opened is not one). What a build depends on: Note [the files
// a chain read].
[[nodiscard]] std::optional<std::vector<PolicyFile>> load_policy_chain(const std::filesystem::path& path,
                                                                       SourceManager& sources, DiagnosticEngine& diags,
                                                                       std::vector<std::filesystem::path>* read = nullptr);

// A policy given as text rather than as a file (load_policy's YAML text): `name` is what
// diagnostics call it, `base` the folder its own relative `extends:` is read from (a base file's
// is relative to that file, as always). Like a file, at most 1 MiB.
struct PolicyText {
  std::string name;
  std::string text;
  std::filesystem::path base;
};

// load_policy_chain of text: the chain has the text first; `read` names only files (not the text).
[[nodiscard]] std::optional<std::vector<PolicyFile>> load_policy_chain(const PolicyText& text, SourceManager& sources,
                                                                       DiagnosticEngine& diags,
                                                                       std::vector<std::filesystem::path>* read = nullptr);

// The PyTorch release a resolution targets: what release gates compare with (Note [release gates]).
struct ResolveTarget {
  ResolveTarget() = default;
  // The common case: a target release, the built-in op history, the policy's own key.
  ResolveTarget(std::optional<model::TorchVersion> release) : torch_version(std::move(release)) {}  // NOLINT(google-explicit-constructor)

  // The release whose schemas are given; without it a gated entry is an error.
  std::optional<model::TorchVersion> torch_version;
  // Which releases define each aten overload: tells "absent in this release" from "unknown".
  const model::OpHistory* history = &model::OpHistory::builtin();
  // Register under this autocast key instead of the policy's (`generate --dispatch-key`); checked
  // against the device like a key the policy names.
  std::optional<std::string> dispatch_key;
};

// Resolves a chain (requested file first, as load_policy_chain returns it): applies the bases,
// `remove:`, expands names and globs, and checks every rule of the policy language. Reports all
// problems; nullopt when there was any error (warnings alone still give a result).
[[nodiscard]] std::optional<ResolvedPolicy> resolve_policy(const std::vector<PolicyFile>& chain,
                                                           const model::SchemaSet& schemas, DiagnosticEngine& diags,
                                                           const ResolveTarget& target = {});

// An entry's precision rule (Note [precision rules]) checked against its overload's schema: the
// arguments it names exist and have the right kinds, its values fit their types. Without a
// schema (a manifest's op the schemas at hand lack), values are read by their spelling alone.
[[nodiscard]] std::optional<Rule> resolve_rule(const PolicyEntry& entry, const model::FunctionSchema* schema, DiagnosticEngine& diags);

// The `modules:` section as the resolved model holds it (Note [precision by place]): each value
// read, a dtype checked against `lower_precision` (the policy's; `lower_precision_given` false:
// the device's default stands for it, and the message says so). Reports every problem.
[[nodiscard]] std::optional<std::vector<ModuleSection>> resolve_sections(const std::vector<WrittenSection>& written,
                                                                        const std::vector<std::string>& lower_precision,
                                                                        DiagnosticEngine& diags, bool lower_precision_given = true);

// load_policy_chain + resolve_policy.
[[nodiscard]] std::optional<ResolvedPolicy> load_policy(const std::filesystem::path& path, const model::SchemaSet& schemas,
                                                        SourceManager& sources, DiagnosticEngine& diags,
                                                        const ResolveTarget& target = {});

}  // namespace autocastgen::policy
