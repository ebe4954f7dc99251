// Comparing two resolved policies entry by entry, and printing the result.
#include "audit/diff.h"
#include "audit/markdown.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "emit/policy_json.h"
#include "policy/policy_file.h"

namespace autocastgen::audit {

using policy::PolicyKind;

namespace {

const model::FunctionSchema* find_op(const model::SchemaSet& schemas, const std::string& op) {
  const std::optional<policy::OpPattern> p = policy::parse_op_pattern(op);
  if (!p || p->all_overloads) return nullptr;
  return schemas.find(p->ns, p->unqualified());
}

using Entries = std::vector<const policy::ResolvedEntry*>;

bool same_rule(const policy::ResolvedEntry& a, const policy::ResolvedEntry& b) {
  return a.policy == b.policy && a.redispatch_op == b.redispatch_op && a.message == b.message && a.rule == b.rule;
}

// The entries of one overload, in any order: no call matches two of them (Note [precision
// rules]; entries scoped to modules come first and a plain one last, Note [precision by place]),
// so their order does not change what a call does, and a policy written list by list (`import`)
// may list them in another.
bool same_entries(const Entries& a, const Entries& b) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const policy::ResolvedEntry* x : a) {
    size_t j = 0;
    while (j < b.size() && (used[j] || !same_rule(*x, *b[j]))) ++j;
    if (j == b.size()) return false;
    used[j] = true;
  }
  return true;
}

// Each overload's entries: one, or several with precision rules.
std::map<std::string, Entries> by_op(const policy::ResolvedPolicy& s) {
  std::map<std::string, Entries> out;
  for (const policy::ResolvedEntry& e : s.entries) out[e.op].push_back(&e);
  return out;
}

// What differs: one field of the one entry that changed, else the overload's rules as a whole.
std::string what_changed(const Changed& c) {
  if (c.from_all.size() != c.to_all.size()) return "rules";
  const policy::ResolvedEntry* from_entry = nullptr;
  const policy::ResolvedEntry* to_entry = nullptr;
  for (size_t i = 0; i < c.from_all.size(); ++i) {
    if (same_rule(*c.from_all[i], *c.to_all[i])) continue;
    if (from_entry) return "rules";  // more than one entry changed
    from_entry = c.from_all[i];
    to_entry = c.to_all[i];
  }
  const policy::ResolvedEntry& from = *from_entry;
  const policy::ResolvedEntry& to = *to_entry;
  if (from.policy != to.policy) return from.rule == to.rule ? "policy" : "rules";
  if (from.redispatch_op != to.redispatch_op) return "redispatch";
  if (from.message != to.message) return "message";
  // Note [precision by place]: only where the entry applies.
  if (from.rule.modules != to.rule.modules && from.rule.dtypes == to.rule.dtypes && from.rule.when == to.rule.when &&
      from.rule.unless == to.rule.unless && from.rule.args == to.rule.args)
    return "modules";
  if (from.rule.dtypes != to.rule.dtypes && from.rule.when == to.rule.when && from.rule.unless == to.rule.unless &&
      from.rule.args == to.rule.args)
    return "dtypes";
  if (from.rule.args != to.rule.args && from.rule.condition_str() == to.rule.condition_str()) return "args";
  return from.rule.args == to.rule.args ? "condition" : "rules";
}

// `fp32 {unless: {reduction: none}}; lower_precision_fp {when: {reduction: none}}`.
std::string entries_text(const Entries& entries) {
  std::vector<std::string> items;
  for (const policy::ResolvedEntry* e : entries) {
    const std::string rule = e->rule.str();
    items.push_back(fmt::format("{}{}", policy::spelling(e->policy), rule.empty() ? "" : " " + rule));
  }
  return fmt::format("{}", fmt::join(items, "; "));
}

std::string side_summary(const policy::ResolvedPolicy& s) {
  return fmt::format("{} ({}; device `{}`, {}, {} overloads)", s.name, policy::spelling(s.source), s.device, s.dispatch_key,
                     s.overload_count());
}

nlohmann::ordered_json side_json(const policy::ResolvedPolicy& s) {
  nlohmann::ordered_json j;
  j["input"] = s.name;
  j["kind"] = policy::spelling(s.source);
  j["device"] = s.device;
  j["dispatch_key"] = s.dispatch_key;
  j["overloads"] = s.overload_count();
  return j;
}

// Note [precision by place]: the `modules:` section, one row per pattern added, removed or given
// another value (`modules: lm_head`), and one for the order when only the order changed (the
// first listed of the patterns matching one module decides).
void diff_sections(const std::vector<policy::ModuleSection>& a, const std::vector<policy::ModuleSection>& b,
                   std::vector<FieldChange>& out) {
  if (a == b) return;
  const auto find = [](const std::vector<policy::ModuleSection>& sections, const std::string& pattern) -> const policy::ModuleSection* {
    for (const policy::ModuleSection& s : sections)
      if (s.pattern == pattern) return &s;
    return nullptr;
  };
  const size_t before = out.size();
  for (const policy::ModuleSection& s : a) {
    const policy::ModuleSection* other = find(b, s.pattern);
    if (!other || other->value() != s.value())
      out.push_back({"modules: " + policy::pattern_spelling(s.pattern), s.value(), other ? other->value() : "none"});
  }
  for (const policy::ModuleSection& s : b)
    if (!find(a, s.pattern)) out.push_back({"modules: " + policy::pattern_spelling(s.pattern), "none", s.value()});
  if (out.size() == before) out.push_back({"modules (order)", policy::sections_str(a), policy::sections_str(b)});
}

}  // namespace

PolicyDiff diff_policies(const DiffSide& a, const DiffSide& b) {
  PolicyDiff diff;
  diff.distinct_schemas = a.schemas != b.schemas;
  const auto ea = by_op(*a.policy);
  const auto eb = by_op(*b.policy);
  for (const auto& [op, entries] : eb) {
    if (ea.count(op)) continue;
    for (const policy::ResolvedEntry* e : entries) diff.added.push_back({e, diff.distinct_schemas && !find_op(*a.schemas, op)});
  }
  for (const auto& [op, entry] : ea) {
    auto it = eb.find(op);
    if (it == eb.end()) {
      for (const policy::ResolvedEntry* e : entry) diff.removed.push_back({e, diff.distinct_schemas && !find_op(*b.schemas, op)});
      continue;
    }
    if (!same_entries(entry, it->second)) {
      diff.changed.push_back({entry.front(), it->second.front(), entry, it->second});
    } else if (diff.distinct_schemas) {
      const model::FunctionSchema* sa = find_op(*a.schemas, op);
      const model::FunctionSchema* sb = find_op(*b.schemas, op);
      if (sa && sb && sa->str() != sb->str()) diff.schema_changed.emplace_back(sa, sb);
    }
  }
  const policy::ResolvedPolicy& pa = *a.policy;
  const policy::ResolvedPolicy& pb = *b.policy;
  if (pa.device != pb.device) diff.header.push_back({"device", pa.device, pb.device});
  if (pa.dispatch_key != pb.dispatch_key) diff.header.push_back({"dispatch_key", pa.dispatch_key, pb.dispatch_key});
  // C++ registrations do not say which dtypes they use; compare only when both sides do.
  if (!pa.lower_precision.empty() && !pb.lower_precision.empty() && pa.lower_precision != pb.lower_precision)
    diff.header.push_back({"lower_precision", fmt::format("{}", fmt::join(pa.lower_precision, "/")),
                           fmt::format("{}", fmt::join(pb.lower_precision, "/"))});
  // C++ registrations say no recipe either; a policy or manifest without one says "none".
  if (pa.source != policy::PolicySource::cpp && pb.source != policy::PolicySource::cpp && pa.fp8 != pb.fp8)
    diff.header.push_back({"fp8", pa.fp8 ? pa.fp8->str() : "none", pb.fp8 ? pb.fp8->str() : "none"});
  diff_sections(pa.sections, pb.sections, diff.header);
  return diff;
}

bool has_changes(const PolicyDiff& diff, DiffCategory category) {
  switch (category) {
    case DiffCategory::added: return !diff.added.empty();
    case DiffCategory::removed: return !diff.removed.empty();
    case DiffCategory::changed: return !diff.changed.empty();
  }
  return false;
}

std::string diff_markdown(const PolicyDiff& diff, const policy::ResolvedPolicy& a, const policy::ResolvedPolicy& b) {
  std::string out = "# Policy diff\n\n";
  out += fmt::format("- A: {}\n- B: {}\n\n", side_summary(a), side_summary(b));
  out += fmt::format("{} added, {} removed, {} changed.\n", diff.added.size(), diff.removed.size(), diff.changed.size());
  if (!diff.header.empty()) {
    out += "\n## Header\n\n| field | A | B |\n|---|---|---|\n";
    for (const FieldChange& h : diff.header) out += fmt::format("| {} | {} | {} |\n", h.field, h.from, h.to);
  }
  auto one_sided = [&](const char* title, const std::vector<OneSided>& items, const char* absent_note) {
    out += fmt::format("\n## {} ({})\n\n", title, items.size());
    if (items.empty()) {
      out += "None.\n";
      return;
    }
    out += "| op | policy | note |\n|---|---|---|\n";
    for (const OneSided& item : items) {
      std::string note = item.absent_from_other_schemas ? absent_note : "";
      if (item.entry->policy == PolicyKind::fp32_append_dtype && !item.entry->redispatch_op.empty())
        note += (note.empty() ? "" : "; ") + fmt::format("calls `{}`", item.entry->redispatch_op);
      const std::string rule = item.entry->rule.str();
      if (!rule.empty()) note += (note.empty() ? "" : "; ") + fmt::format("`{}`", rule);
      out += fmt::format("| `{}` | {} | {} |\n", item.entry->op, policy::spelling(item.entry->policy), markdown_cell(note));
    }
  };
  one_sided("Added", diff.added, "not in A's op schemas");
  one_sided("Removed", diff.removed, "not in B's op schemas");
  out += fmt::format("\n## Changed ({})\n\n", diff.changed.size());
  if (diff.changed.empty()) {
    out += "None.\n";
  } else {
    out += "| op | A | B | what |\n|---|---|---|---|\n";
    for (const Changed& c : diff.changed) {
      const std::string what = what_changed(c);
      std::string from(policy::spelling(c.from->policy));
      std::string to(policy::spelling(c.to->policy));
      if (what == "dtypes" || what == "modules" || what == "condition" || what == "args" || what == "rules") {
        from = entries_text(c.from_all);
        to = entries_text(c.to_all);
      } else if (what == "redispatch") {
        from += fmt::format(" → `{}`", c.from->redispatch_op);
        to += fmt::format(" → `{}`", c.to->redispatch_op);
      } else if (what == "message") {
        from += ": " + c.from->message;
        to += ": " + c.to->message;
      }
      out += fmt::format("| `{}` | {} | {} | {} |\n", c.from->op, markdown_cell(from), markdown_cell(to), what);
    }
  }
  if (!diff.schema_changed.empty()) {
    out += fmt::format("\n## Same policy, new schema ({})\n\n| A | B |\n|---|---|\n", diff.schema_changed.size());
    for (const auto& [sa, sb] : diff.schema_changed) out += fmt::format("| `{}` | `{}` |\n", markdown_cell(sa->str()), markdown_cell(sb->str()));
  }
  return out;
}

nlohmann::ordered_json diff_json(const PolicyDiff& diff, const policy::ResolvedPolicy& a, const policy::ResolvedPolicy& b) {
  nlohmann::ordered_json out;
  auto one_sided = [&](const std::vector<OneSided>& items, const char* absent) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const OneSided& item : items) {
      nlohmann::ordered_json j;
      j["op"] = item.entry->op;
      j["policy"] = policy::spelling(item.entry->policy);
      if (!item.entry->redispatch_op.empty()) j["redispatch"] = item.entry->redispatch_op;
      if (item.entry->policy == PolicyKind::banned) j["message"] = item.entry->message;
      emit::add_rule_json(j, item.entry->rule);
      if (item.absent_from_other_schemas) j["schemas"] = absent;
      list.push_back(std::move(j));
    }
    return list;
  };
  out["added"] = one_sided(diff.added, "not in A's op schemas");
  out["removed"] = one_sided(diff.removed, "not in B's op schemas");
  out["changed"] = nlohmann::ordered_json::array();
  for (const Changed& c : diff.changed) {
    nlohmann::ordered_json j;
    j["op"] = c.from->op;
    j["from"] = policy::spelling(c.from->policy);
    j["to"] = policy::spelling(c.to->policy);
    const std::string what = what_changed(c);
    j["what"] = what;
    if (what == "dtypes" || what == "modules" || what == "condition" || what == "args" || what == "rules") {
      const auto entries_json = [](const Entries& entries) {
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (const policy::ResolvedEntry* e : entries) {
          nlohmann::ordered_json entry = {{"policy", policy::spelling(e->policy)}};
          emit::add_rule_json(entry, e->rule);
          list.push_back(std::move(entry));
        }
        return list;
      };
      j["entries"] = {{"from", entries_json(c.from_all)}, {"to", entries_json(c.to_all)}};
    }
    // Details only where both sides have them (a policy change says enough otherwise).
    const bool both_append = c.from->policy == PolicyKind::fp32_append_dtype && c.to->policy == PolicyKind::fp32_append_dtype;
    const bool both_banned = c.from->policy == PolicyKind::banned && c.to->policy == PolicyKind::banned;
    if (both_append && c.from->redispatch_op != c.to->redispatch_op)
      j["redispatch"] = {{"from", c.from->redispatch_op}, {"to", c.to->redispatch_op}};
    if (both_banned && c.from->message != c.to->message) j["message"] = {{"from", c.from->message}, {"to", c.to->message}};
    out["changed"].push_back(std::move(j));
  }
  out["header"] = nlohmann::ordered_json::array();
  for (const FieldChange& h : diff.header) out["header"].push_back({{"field", h.field}, {"from", h.from}, {"to", h.to}});
  if (!diff.schema_changed.empty()) {
    out["schema_changed"] = nlohmann::ordered_json::array();
    for (const auto& [sa, sb] : diff.schema_changed) out["schema_changed"].push_back({{"from", sa->str()}, {"to", sb->str()}});
  }
  out["a"] = side_json(a);
  out["b"] = side_json(b);
  return out;
}

}  // namespace autocastgen::audit
