// Coverage of a resolved policy against the eligible overloads of the op schemas.
#include "audit/coverage.h"
#include "audit/markdown.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include <fmt/format.h>

#include "emit/policy_json.h"
#include "policy/resolver.h"

namespace autocastgen::audit {

using policy::PolicyKind;

namespace {

std::string op_key(const model::OperatorName& name) {
  return name.is_aten() ? name.name : name.ns + "::" + name.name;
}

std::string percent(size_t part, size_t whole) {
  return whole == 0 ? std::string("0.0") : fmt::format("{:.1f}", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// How per-op listings name an overload: as policies write it (`pow.Scalar`, `mm`).
std::string overload_label(const model::FunctionSchema& schema) { return schema.name().display(); }

std::string entry_detail(const policy::ResolvedEntry& e) {
  std::string detail;
  if (e.policy == PolicyKind::fp32_append_dtype && !e.redispatch_op.empty()) detail = fmt::format("calls `{}`", e.redispatch_op);
  if (e.policy == PolicyKind::banned) detail = e.message;
  // Note [precision rules]: when the entry applies, and what its named arguments become.
  if (const std::string rule = e.rule.str(); !rule.empty()) detail += (detail.empty() ? "" : "; ") + fmt::format("`{}`", rule);
  return detail;
}

}  // namespace

CoverageReport compute_coverage(const policy::ResolvedPolicy& policy, const model::SchemaSet& schemas, std::vector<std::string> schema_files) {
  CoverageReport report;
  report.policy = &policy;
  report.schema_files = std::move(schema_files);
  std::unordered_set<const model::FunctionSchema*> covered;
  std::map<std::string, std::vector<const policy::ResolvedEntry*>> listed_by_op;
  for (const policy::ResolvedEntry& e : policy.entries) {
    if (e.schema) {
      covered.insert(e.schema);
      listed_by_op[op_key(e.schema->name())].push_back(&e);
    }
  }
  std::map<std::string, UncoveredOp> uncovered;  // sorted by op name
  for (const model::FunctionSchema& schema : schemas.schemas()) {
    if (!model::is_autocast_eligible(schema)) continue;
    ++report.eligible;
    if (covered.count(&schema)) {
      ++report.covered;
      continue;
    }
    UncoveredOp& op = uncovered[op_key(schema.name())];
    op.op = op_key(schema.name());
    op.overloads.push_back(&schema);
  }
  std::map<const OpFamily*, FamilyGroup> groups;
  for (auto& [name, op] : uncovered) {
    if (auto it = listed_by_op.find(name); it != listed_by_op.end()) op.listed = it->second;
    const OpFamily& family = family_of(op.overloads.front()->name().name);
    FamilyGroup& group = groups[&family];
    group.family = &family;
    group.overloads += op.overloads.size();
    group.ops.push_back(std::move(op));
  }
  report.uncovered_ops = uncovered.size();
  for (const OpFamily& family : op_families())
    if (auto it = groups.find(&family); it != groups.end()) report.families.push_back(std::move(it->second));
  return report;
}

std::string coverage_markdown(const CoverageReport& report, const SourceManager& sources) {
  const policy::ResolvedPolicy& p = *report.policy;
  std::string out;
  out += fmt::format("# Autocast coverage: {}\n\n", p.name);
  out += fmt::format("Device `{}` ({}), lower precision {}; op schemas: {}.\n\n", p.device, p.dispatch_key,
                     fmt::join(p.lower_precision, "/"), fmt::join(report.schema_files, ", "));
  out += fmt::format("{} of {} eligible overloads are listed ({}%); {} overloads of {} ops are in no list.\n\n", report.covered,
                     report.eligible, percent(report.covered, report.eligible), report.eligible - report.covered,
                     report.uncovered_ops);
  out += "## Counts\n\n| policy | overloads |\n|---|---:|\n";
  for (PolicyKind kind : p.reported_kinds()) out += fmt::format("| {} | {} |\n", policy::spelling(kind), p.count(kind));
  out += fmt::format("| **total** | **{}**{} |\n\n", p.overload_count(),
                     p.overload_count() == p.entries.size() ? "" : fmt::format(" ({} entries)", p.entries.size()));

  // Note [precision by place]: said only when the policy has a section.
  if (!p.sections.empty()) {
    out += "## Module sections\n\nWhat autocast does inside modules whose path matches (the innermost matching module decides; among\n"
           "patterns matching the same module, the first listed).\n\n| pattern | inside | given at |\n|---|---|---|\n";
    for (const policy::ModuleSection& s : p.sections)
      out += fmt::format("| `{}` | {} | {} |\n", markdown_cell(s.pattern), s.value(), sources.location_text(s.location));
    out += "\n";
  }
  out += "## Listed overloads\n\n| op | policy | detail | listed at |\n|---|---|---|---|\n";
  for (const policy::ResolvedEntry& e : p.entries)
    out += fmt::format("| `{}` | {} | {} | {} |\n", e.op, policy::spelling(e.policy), markdown_cell(entry_detail(e)),
                       sources.location_text(e.location));
  out += "\n## Not covered, by family\n\n";
  out += "Eligible overloads (functional, with a Tensor input) that no list names, grouped by a name heuristic\n"
         "(docs/audit.md, \"Families\"). The hint says where PyTorch's own lists tend to put such ops; each op\n"
         "still needs a decision.\n\n";
  out += "| family | ops | overloads | hint |\n|---|---:|---:|---|\n";
  for (const FamilyGroup& g : report.families)
    out += fmt::format("| {} | {} | {} | {} |\n", g.family->title, g.ops.size(), g.overloads, markdown_cell(g.family->hint));
  for (const FamilyGroup& g : report.families) {
    out += fmt::format("\n### {} ({} ops, {} overloads)\n\n", g.family->title, g.ops.size(), g.overloads);
    out += "| op | overloads not listed | overloads listed |\n|---|---|---|\n";
    for (const UncoveredOp& op : g.ops) {
      std::vector<std::string> names;
      for (const model::FunctionSchema* s : op.overloads) names.push_back(fmt::format("`{}`", overload_label(*s)));
      std::vector<std::string> listed;
      for (const policy::ResolvedEntry* e : op.listed) listed.push_back(fmt::format("`{}` ({})", e->op, policy::spelling(e->policy)));
      out += fmt::format("| `{}` | {} | {} |\n", op.op, fmt::join(names, ", "), fmt::join(listed, ", "));
    }
  }
  return out;
}

nlohmann::ordered_json coverage_json(const CoverageReport& report, const SourceManager& sources) {
  const policy::ResolvedPolicy& p = *report.policy;
  nlohmann::ordered_json out;
  out["policy"] = p.name;
  out["device"] = p.device;
  out["dispatch_key"] = p.dispatch_key;
  out["lower_precision"] = p.lower_precision;
  out["schemas"] = report.schema_files;
  nlohmann::ordered_json counts = emit::counts_json(p);
  counts["total"] = p.overload_count();
  if (p.overload_count() != p.entries.size()) counts["entries"] = p.entries.size();  // Note [precision rules]
  out["counts"] = counts;
  out["eligible"] = {{"overloads", report.eligible},
                     {"listed", report.covered},
                     {"not_listed", report.eligible - report.covered},
                     {"not_listed_ops", report.uncovered_ops}};
  if (!p.sections.empty()) out["modules"] = emit::sections_json(p.sections);  // Note [precision by place]
  out["ops"] = nlohmann::ordered_json::array();
  for (const policy::ResolvedEntry& e : p.entries) {
    nlohmann::ordered_json o = emit::entry_json(e);
    o["source"] = sources.location_text(e.location);
    out["ops"].push_back(std::move(o));
  }
  out["not_covered"] = nlohmann::ordered_json::array();
  for (const FamilyGroup& g : report.families) {
    nlohmann::ordered_json f;
    f["family"] = g.family->id;
    f["title"] = g.family->title;
    f["hint"] = g.family->hint;
    f["overloads"] = g.overloads;
    f["ops"] = nlohmann::ordered_json::array();
    for (const UncoveredOp& op : g.ops) {
      nlohmann::ordered_json o;
      o["op"] = op.op;
      o["overloads"] = nlohmann::ordered_json::array();
      for (const model::FunctionSchema* s : op.overloads) o["overloads"].push_back(overload_label(*s));
      if (!op.listed.empty()) {
        o["listed"] = nlohmann::ordered_json::array();
        for (const policy::ResolvedEntry* e : op.listed) o["listed"].push_back({{"op", e->op}, {"policy", policy::spelling(e->policy)}});
      }
      f["ops"].push_back(std::move(o));
    }
    out["not_covered"].push_back(std::move(f));
  }
  return out;
}

}  // namespace autocastgen::audit
