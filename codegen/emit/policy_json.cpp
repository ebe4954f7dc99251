// The JSON form of resolved entries and counts.
#include "emit/policy_json.h"

namespace autocastgen::emit {

nlohmann::ordered_json entry_json(const policy::ResolvedEntry& entry) {
  nlohmann::ordered_json out;
  out["op"] = entry.op;
  out["policy"] = policy::spelling(entry.policy);
  if (entry.schema) out["schema"] = entry.schema->str();
  if (entry.policy == policy::PolicyKind::fp32_append_dtype && !entry.redispatch_op.empty()) out["redispatch"] = entry.redispatch_op;
  if (entry.policy == policy::PolicyKind::banned) out["message"] = entry.message;
  return out;
}

nlohmann::ordered_json fp8_recipe_json(const policy::Fp8Recipe& recipe) {
  nlohmann::ordered_json out;
  out["scaling"] = recipe.scaling;
  out["granularity"] = recipe.granularity;
  out["forward"] = recipe.forward;
  out["backward"] = recipe.backward;
  if (recipe.scaling == "delayed") out["amax_history_len"] = recipe.amax_history_len;
  out["margin"] = recipe.margin;
  return out;
}

nlohmann::ordered_json counts_json(const policy::ResolvedPolicy& policy) {
  nlohmann::ordered_json counts;
  for (const policy::PolicyKind kind : policy.reported_kinds()) counts[std::string(policy::spelling(kind))] = policy.count(kind);
  return counts;
}

}  // namespace autocastgen::emit
