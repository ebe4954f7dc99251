// Input kinds by extension, and manifests read back into the resolved-policy model.
#include "audit/inputs.h"

#include "policy/resolver.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "support/strings.h"
#include "support/yaml.h"

namespace autocastgen::audit {

namespace fs = std::filesystem;
using policy::PolicyKind;
using policy::PolicySource;

std::optional<PolicySource> input_kind(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".yaml" || ext == ".yml") return PolicySource::policy_file;
  if (ext == ".json") return PolicySource::manifest;
  static constexpr std::string_view kCpp[] = {".cpp", ".cc", ".cxx", ".c++", ".cu", ".h", ".hh", ".hpp", ".hxx", ".inl"};
  if (std::find(std::begin(kCpp), std::end(kCpp), ext) != std::end(kCpp)) return PolicySource::cpp;
  return std::nullopt;
}

namespace {

// A manifest entry's members besides the policy language's own.
constexpr std::array<std::string_view, 4> kManifestOnlyKeys = {"policy", "schema", "wrapper", "dispatch_key"};


class ManifestReader {
 public:
  ManifestReader(const model::SchemaSet& schemas, DiagnosticEngine& diags) : schemas_(schemas), diags_(diags), fields_(diags) {}

  std::optional<policy::ResolvedPolicy> run(const YamlNode& root, policy::ResolvedPolicy policy) {
    const size_t errors_before = diags_.error_count();
    if (!root.is_mapping()) {
      diags_.error(root.location(),
                   fmt::format("a manifest is a JSON object with 'device', 'dispatch_key' and 'ops'; found {}", root.describe_json()));
      return std::nullopt;
    }
    if (const YamlNode* device = required(root, "device"))
      if (std::optional<policy::Located> d = fields_.device(*device)) policy.device = d->text;
    if (const YamlNode* key = required(root, "dispatch_key"))
      if (std::optional<policy::Located> k = fields_.dispatch_key(*key)) policy.dispatch_key = k->text;
    if (const YamlNode* dtypes = root.find("lower_precision"))
      if (std::optional<std::vector<policy::Located>> list = fields_.lower_precision(*dtypes))
        for (const policy::Located& d : *list) policy.lower_precision.push_back(d.text);
    if (const YamlNode* recipe = root.find("fp8")) policy.fp8 = fields_.fp8(*recipe);
    // Note [precision by place]: the section, in order, checked as a policy file's.
    if (const YamlNode* sections = root.find("modules"))
      if (std::optional<std::vector<policy::WrittenSection>> written = fields_.sections(*sections)) {
        const std::vector<std::string> any = {"float16", "bfloat16"};
        if (std::optional<std::vector<policy::ModuleSection>> resolved =
                policy::resolve_sections(*written, policy.lower_precision.empty() ? any : policy.lower_precision, diags_))
          policy.sections = std::move(*resolved);
      }
    if (const YamlNode* ops = required(root, "ops")) {
      if (!ops->is_sequence()) {
        diags_.error(ops->location(), fmt::format("'ops' must be an array of objects, found {}", ops->describe_json()));
      } else {
        std::unordered_map<std::string, size_t> seen;  // op -> index in entries
        for (const YamlNode& item : ops->items()) read_op(item, policy, seen);
      }
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return policy;
  }

 private:
  const YamlNode* required(const YamlNode& object, std::string_view key) {
    const YamlNode* value = object.find(key);
    if (!value) diags_.error(object.location(), fmt::format("missing member '{}'", key));
    return value;
  }

  // Looks a name up in the schemas; a warning when they lack it (another PyTorch made the manifest).
  const model::FunctionSchema* lookup(const policy::Located& name, bool warn_unknown) {
    const std::optional<policy::OpPattern> pattern = policy::parse_op_pattern(name.text);
    const model::FunctionSchema* schema = schemas_.find(pattern->ns, pattern->unqualified());
    if (!schema && warn_unknown) {
      const std::string suggestion = closest_match(pattern->name, schemas_.operator_names(pattern->ns));
      diags_.warning(name.location,
                     fmt::format("'{}' is not in the op schemas{}; was the manifest generated from another PyTorch? (give "
                                 "--schemas for each input)",
                                 name.text, suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion)),
                     name.length);
    }
    return schema;
  }

  void read_op(const YamlNode& item, policy::ResolvedPolicy& policy, std::unordered_map<std::string, size_t>& seen) {
    if (!item.is_mapping()) {
      diags_.error(item.location(), fmt::format("each entry of 'ops' must be an object with 'op' and 'policy', found {}", item.describe_json()));
      return;
    }
    const YamlNode* policy_name = required(item, "policy");
    if (!policy_name) return;
    const std::optional<PolicyKind> kind = fields_.policy(*policy_name);
    if (!kind) return;
    const std::optional<policy::PolicyEntry> entry = fields_.entry(*kind, item, kManifestOnlyKeys);
    if (!entry) return;
    if (entry->op.text.find('*') != std::string::npos) {
      diags_.error(entry->op.location, fmt::format("a manifest names single overloads, not '{}'", entry->op.text), entry->op.length);
      return;
    }
    policy::ResolvedEntry resolved;
    resolved.schema = lookup(entry->op, /*warn_unknown=*/true);
    resolved.op = resolved.schema ? resolved.schema->name().display() : entry->op.text;  // `aten::mm` -> `mm`
    resolved.policy = *kind;
    resolved.message = entry->message ? entry->message->text : std::string();
    resolved.location = entry->op.location;
    resolved.length = entry->op.length;
    if (entry->modules)
      for (const policy::Located& pattern : *entry->modules) resolved.module_locations.push_back(pattern.location);
    if (*kind == PolicyKind::fp32_append_dtype) {
      // A policy file may leave the sibling to the resolver; a manifest records the one it chose.
      if (!entry->redispatch) {
        diags_.error(item.location(), "an fp32_append_dtype entry needs 'redispatch' (the overload it calls)");
        return;
      }
      resolved.redispatch = lookup(*entry->redispatch, /*warn_unknown=*/false);
      resolved.redispatch_op = resolved.redispatch ? resolved.redispatch->name().display() : entry->redispatch->text;
    }
    std::optional<policy::Rule> rule = policy::resolve_rule(*entry, resolved.schema, diags_);
    if (!rule) return;
    resolved.rule = std::move(*rule);
    // An overload has several entries only with rules that no call could match twice, next to
    // each other (Note [precision rules]), those scoped to modules first (Note [precision by
    // place]): a plain entry may follow scoped ones only.
    if (auto [it, inserted] = seen.emplace(resolved.op, policy.entries.size()); !inserted) {
      const policy::ResolvedEntry& first = policy.entries[it->second];
      const policy::ResolvedEntry& last = policy.entries.back();
      if (!resolved.rule.modules.empty() && last.op == resolved.op && last.rule.modules.empty()) {
        diags_.error(resolved.location,
                     fmt::format("'{}' is scoped to modules after an entry that is not; an overload's scoped entries come first",
                                 resolved.op),
                     resolved.length);
        return;
      }
      if (last.op != resolved.op || (!resolved.rule.conditional() && !last.rule.conditional()) ||
          std::any_of(policy.entries.begin() + static_cast<std::ptrdiff_t>(it->second), policy.entries.end(),
                      [&](const policy::ResolvedEntry& e) { return policy::rules_overlap(e.rule, resolved.rule); })) {
        diags_.error(resolved.location, fmt::format("'{}' is listed twice", resolved.op), resolved.length);
        diags_.note(first.location, "first listed here", first.length);
        return;
      }
    }
    policy.entries.push_back(std::move(resolved));
  }

  const model::SchemaSet& schemas_;
  DiagnosticEngine& diags_;
  policy::FieldReader fields_;
};

}  // namespace

std::optional<policy::ResolvedPolicy> read_manifest(uint32_t file, std::string name, const model::SchemaSet& schemas,
                                                    const SourceManager& sources, DiagnosticEngine& diags) {
  std::optional<YamlNode> root = parse_yaml(sources, file, diags, "JSON", "manifests", kMaxRecordFileBytes);
  if (!root) return std::nullopt;
  policy::ResolvedPolicy policy;
  policy.source = PolicySource::manifest;
  policy.name = std::move(name);
  return ManifestReader(schemas, diags).run(*root, std::move(policy));
}

}  // namespace autocastgen::audit
