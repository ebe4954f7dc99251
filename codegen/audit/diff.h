// `audit diff`: ops added, removed and changed between two policy snapshots, in a stable order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audit/snapshot.h"
#include "model/schema_set.h"

namespace autocastgen::audit {

struct DiffSide {
  const PolicySnapshot* snapshot;
  const model::SchemaSet* schemas;  // what the side was read with
};

struct OneSided {
  const SnapshotEntry* entry;
  // The op does not exist in the other side's schemas (only reported when the sides were read
  // with different schema files): it was added or removed by PyTorch, not by the policy.
  bool absent_from_other_schemas = false;
};

struct Changed {
  const SnapshotEntry* from;
  const SnapshotEntry* to;
};

struct FieldChange {
  std::string field;  // device, dispatch_key, lower_precision
  std::string from;
  std::string to;
};

struct PolicyDiff {
  std::vector<OneSided> added;    // in B only, sorted by op
  std::vector<OneSided> removed;  // in A only, sorted by op
  std::vector<Changed> changed;   // in both with another policy, redispatch target or message
  std::vector<FieldChange> header;
  // In both, same entry, but the op's schema text differs between the two schema files.
  std::vector<std::pair<const model::FunctionSchema*, const model::FunctionSchema*>> schema_changed;
  bool distinct_schemas = false;
};

[[nodiscard]] PolicyDiff diff_policies(const DiffSide& a, const DiffSide& b);

enum class DiffCategory { added, removed, changed };
[[nodiscard]] bool has_changes(const PolicyDiff& diff, DiffCategory category);

[[nodiscard]] std::string diff_markdown(const PolicyDiff& diff, const PolicySnapshot& a, const PolicySnapshot& b);
[[nodiscard]] nlohmann::ordered_json diff_json(const PolicyDiff& diff, const PolicySnapshot& a, const PolicySnapshot& b);

}  // namespace autocastgen::audit
