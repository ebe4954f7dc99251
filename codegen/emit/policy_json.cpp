// The JSON form of resolved entries and counts.
#include "emit/policy_json.h"

#include <cmath>
#include <string>

namespace autocastgen::emit {

nlohmann::ordered_json entry_json(const policy::ResolvedEntry& entry) {
  nlohmann::ordered_json out;
  out["op"] = entry.op;
  out["policy"] = policy::spelling(entry.policy);
  if (entry.schema) out["schema"] = entry.schema->str();
  if (entry.policy == policy::PolicyKind::fp32_append_dtype && !entry.redispatch_op.empty()) out["redispatch"] = entry.redispatch_op;
  if (entry.policy == policy::PolicyKind::banned) out["message"] = entry.message;
  add_rule_json(out, entry.rule);
  return out;
}

namespace {
// A condition value as JSON: numbers, booleans, null and strings as themselves; infinities and
// NaN, which JSON lacks, and reduction names as the policy language spells them.
nlohmann::ordered_json value_json(const policy::RuleValue& value) {
  using Kind = policy::RuleValue::Kind;
  switch (value.kind) {
    case Kind::none: return nullptr;
    case Kind::boolean: return value.boolean;
    case Kind::integer: return value.spelling == std::to_string(value.integer) ? nlohmann::ordered_json(value.integer)
                                                                                : nlohmann::ordered_json(value.spelling);
    case Kind::real: return std::isfinite(value.real) ? nlohmann::ordered_json(value.real) : nlohmann::ordered_json(value.spelling);
    case Kind::text:
    case Kind::dtype: return value.text;
  }
  return nullptr;
}

nlohmann::ordered_json conditions_json(const std::vector<policy::ArgCondition>& conditions) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const policy::ArgCondition& c : conditions) {
    if (c.values.size() == 1) {
      out[c.arg] = value_json(c.values.front());
      continue;
    }
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (const policy::RuleValue& v : c.values) values.push_back(value_json(v));
    out[c.arg] = std::move(values);
  }
  return out;
}
}  // namespace

void add_rule_json(nlohmann::ordered_json& entry, const policy::Rule& rule) {
  if (!rule.dtypes.empty()) entry["dtypes"] = rule.dtypes;
  if (!rule.modules.empty()) entry["modules"] = rule.modules;
  if (!rule.when.empty()) entry["when"] = conditions_json(rule.when);
  if (!rule.unless.empty()) entry["unless"] = conditions_json(rule.unless);
  if (!rule.args.empty()) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (const policy::ArgCastRule& a : rule.args) args[a.arg] = policy::spelling(a.cast);
    entry["args"] = std::move(args);
  }
}

nlohmann::ordered_json sections_json(const std::vector<policy::ModuleSection>& sections) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const policy::ModuleSection& s : sections) out[s.pattern] = s.value();
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
  if (recipe.select != "all") out["select"] = recipe.select;
  return out;
}

nlohmann::ordered_json counts_json(const policy::ResolvedPolicy& policy) {
  nlohmann::ordered_json counts;
  for (const policy::PolicyKind kind : policy.reported_kinds()) counts[std::string(policy::spelling(kind))] = policy.count(kind);
  return counts;
}

}  // namespace autocastgen::emit
