// `audit diff`: ops added, removed and changed between two resolved policies, in a stable order.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audit/inputs.h"
#include "model/schema_set.h"

namespace autocastgen::audit {

struct DiffSide {
  const policy::ResolvedPolicy* policy;
  const model::SchemaSet* schemas;  // what the side was read with
};

struct OneSided {
  const policy::ResolvedEntry* entry;
  // The op does not exist in the other side's schemas (only reported when the sides were read
  // with different schema files): it was added or removed by PyTorch, not by the policy.
  bool absent_from_other_schemas = false;
};

// An overload whose entries differ. With precision rules an overload may have several entries
// (Note [precision rules]); `from` and `to` are the first of each side, `*_all` all of them.
struct Changed {
  const policy::ResolvedEntry* from;
  const policy::ResolvedEntry* to;
  std::vector<const policy::ResolvedEntry*> from_all;
  std::vector<const policy::ResolvedEntry*> to_all;
};

struct FieldChange {
  std::string field;  // device, dispatch_key, lower_precision, fp8, `modules: <pattern>`, `modules (order)`
  std::string from;
  std::string to;
};

struct PolicyDiff {
  std::vector<OneSided> added;    // in B only, sorted by op
  std::vector<OneSided> removed;  // in A only, sorted by op
  std::vector<Changed> changed;   // in both with another policy, redispatch target, message or rule
  std::vector<FieldChange> header;
  // In both, same entry, but the op's schema text differs between the two schema files.
  std::vector<std::pair<const model::FunctionSchema*, const model::FunctionSchema*>> schema_changed;
  bool distinct_schemas = false;
};

[[nodiscard]] PolicyDiff diff_policies(const DiffSide& a, const DiffSide& b);

enum class DiffCategory { added, removed, changed };
[[nodiscard]] bool has_changes(const PolicyDiff& diff, DiffCategory category);

[[nodiscard]] std::string diff_markdown(const PolicyDiff& diff, const policy::ResolvedPolicy& a, const policy::ResolvedPolicy& b);
[[nodiscard]] nlohmann::ordered_json diff_json(const PolicyDiff& diff, const policy::ResolvedPolicy& a, const policy::ResolvedPolicy& b);

}  // namespace autocastgen::audit
