// A policy as audit compares it: device, key and one entry per overload, whatever it was read from
// (a policy file, a generated manifest, or C++ registrations brought in by the importer).
#pragma once

#include "support/paths.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/schema_set.h"
#include "policy/policy.h"
#include "support/diagnostics.h"

namespace autocastgen::audit {

enum class InputKind { policy, manifest, cpp };
[[nodiscard]] std::string_view spelling(InputKind kind);

// What a file is, by its extension: .yaml/.yml a policy, .json a manifest, .cpp/.cc/.cxx/.cu/.h/.hpp
// (and a few more C++ spellings) C++ for the importer; nullopt for anything else.
[[nodiscard]] std::optional<InputKind> input_kind(const std::filesystem::path& path);

struct SnapshotEntry {
  std::string op;  // `name[.overload]`, `ns::` outside aten (policy::display_name)
  policy::PolicyKind policy;
  std::string redispatch;  // fp32_append_dtype: the overload it calls (display name); may be empty when unknown
  std::string message;     // banned only
  SourceLocation location;  // where the input names the op
  uint32_t length = 1;
  const model::FunctionSchema* schema = nullptr;  // the op in the schemas the input was read with, if there
};

struct PolicySnapshot {
  InputKind kind = InputKind::policy;
  std::string name;  // the input as reports print it
  std::string device;
  std::string dispatch_key;
  std::vector<std::string> lower_precision;  // empty when the input does not say (C++)
  std::vector<SnapshotEntry> entries;        // in the input's order

  [[nodiscard]] size_t count(policy::PolicyKind kind) const;
  [[nodiscard]] const SnapshotEntry* find(std::string_view op) const;
};

// A resolved policy as a snapshot.
[[nodiscard]] PolicySnapshot snapshot_of(const policy::ResolvedPolicy& resolved, std::string name);

// Reads a manifest written by `autocastgen generate` (only `device`, `dispatch_key`,
// `lower_precision` and `ops` matter; other members are ignored). Every op is checked against
// `schemas`: a name it does not know is a warning (the manifest may come from another PyTorch).
// Reports every problem with its location; nullopt when there was an error.
[[nodiscard]] std::optional<PolicySnapshot> read_manifest(uint32_t file, std::string name, const model::SchemaSet& schemas,
                                                          const SourceManager& sources, DiagnosticEngine& diags);

using ::autocastgen::display_path;  // support/paths.h

// `file:line:col` of a location, the file printed with display_path.
[[nodiscard]] std::string location_text(const SourceManager& sources, SourceLocation location);

}  // namespace autocastgen::audit
