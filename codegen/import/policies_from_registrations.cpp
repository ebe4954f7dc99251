// Registrations -> one resolved policy per dispatch key, checked against the op schemas.
#include "import/policies_from_registrations.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "emit/torch_signature.h"
#include "policy/resolver.h"
#include "support/strings.h"

namespace autocastgen::import::detail {

using policy::PolicyKind;

namespace {

// A wrapper's rule (Note [precision rules]) named and checked against its op's schema, as a
// policy file's would be: the same reader and messages.
std::optional<policy::Rule> imported_rule(const Registration& r, const model::FunctionSchema& schema, DiagnosticEngine& diags) {
  const ImportedRule& imported = r.rule;
  if (imported.dtypes.empty() && imported.modules.empty() && imported.conditions.empty() && imported.casts.empty()) return policy::Rule{};
  const auto located = [&](const std::string& text) { return policy::Located{text, r.location, r.length, false}; };
  const auto name_of = [&](size_t index) -> std::optional<std::string> {
    if (index < schema.arguments().size()) return schema.arguments()[index].name;
    diags.error(r.location, fmt::format("the wrapper of '{}' tests argument {} of {}", schema.name().display(), index + 1,
                                        schema.arguments().size()),
                r.length);
    return std::nullopt;
  };
  policy::PolicyEntry entry{r.policy, located(r.op_text), std::nullopt, std::nullopt, {}, std::nullopt, {}, {}, {}, std::nullopt};
  if (!imported.dtypes.empty()) {
    entry.dtypes.emplace();
    for (const std::string& dtype : imported.dtypes) entry.dtypes->push_back(located(dtype));
  }
  if (!imported.modules.empty()) {
    entry.modules.emplace();
    for (const std::string& pattern : imported.modules) entry.modules->push_back(located(pattern));
  }
  for (const ImportedCondition& c : imported.conditions) {
    const std::optional<std::string> name = name_of(c.index);
    if (!name) return std::nullopt;
    policy::WrittenCondition written{located(*name), {}, r.location};
    for (const std::optional<std::string>& value : c.values)
      written.values.push_back(value ? std::optional(located(*value)) : std::nullopt);
    (c.negated ? entry.unless : entry.when).push_back(std::move(written));
  }
  for (const auto& [index, cast] : imported.casts) {
    const std::optional<std::string> name = name_of(index);
    if (!name) return std::nullopt;
    entry.args.push_back({located(*name), cast, located(std::string(policy::spelling(cast)))});
  }
  return policy::resolve_rule(entry, &schema, diags);
}

}  // namespace

std::vector<policy::ResolvedPolicy> policies_from_registrations(const std::vector<Registration>& registrations,
                                                                const std::vector<FoundBlock>& blocks,
                                                                std::vector<ImportedSections> sections,
                                                                const model::SchemaSet& schemas, DiagnosticEngine& diags) {
  std::unordered_map<std::string, const model::FunctionSchema*> by_ops_struct;
  for (const model::FunctionSchema& s : schemas.schemas())
    if (s.name().is_aten()) by_ops_struct.emplace(emit::torch_unambiguous_name(s.name()), &s);
  std::vector<policy::ResolvedPolicy> snapshots;
  std::map<std::string, size_t> snapshot_of_key;
  std::map<std::pair<std::string, const model::FunctionSchema*>, const Registration*> seen;
  for (const Registration& r : registrations) {
    std::string ns = r.block_ns;
    std::string unqualified = r.op_text;
    if (const size_t colons = r.op_text.find("::"); colons != std::string::npos) {
      ns = r.op_text.substr(0, colons);
      unqualified = r.op_text.substr(colons + 2);
      if (r.block_ns != "_" && ns != r.block_ns) {
        diags.error(r.location, fmt::format("'{}' is registered in a TORCH_LIBRARY_IMPL block of namespace '{}'", r.op_text, r.block_ns),
                    r.length);
        continue;
      }
    }
    const model::FunctionSchema* schema = schemas.find(ns, unqualified);
    if (!schema) {
      const std::string base = unqualified.substr(0, unqualified.find('.'));
      const std::string suggestion = closest_match(base, schemas.operator_names(ns));
      diags.error(r.location,
                  fmt::format("unknown op '{}::{}'{}", ns, unqualified,
                              !suggestion.empty()              ? fmt::format("; did you mean '{}'?", suggestion)
                              : ns == model::kDefaultNamespace ? std::string("; if the backend defines it, give its schema file "
                                                                             "with --extra-schemas")
                                                               : std::string("; give its schema file with --extra-schemas")),
                  r.length);
      continue;
    }
    const std::string display = schema->name().display();
    std::string why;
    if (!model::is_autocast_eligible(*schema, &why)) {
      diags.warning(r.location, fmt::format("'{}' cannot autocast in the policy language ({}); left out", display, why), r.length);
      continue;
    }
    const policy::DeviceInfo* device = nullptr;
    for (const policy::DeviceInfo& d : policy::autocast_devices())
      if (d.dispatch_key == r.dispatch_key) device = &d;
    if (!r.kernel_device.empty() && r.kernel_device != emit::torch_device_type(std::string(device->device)))
      diags.warning(r.location,
                    fmt::format("the kernel for '{}' casts for device {} but is registered for {}", display, r.kernel_device, r.dispatch_key),
                    r.length);
    if (r.policy != PolicyKind::fp32_append_dtype && !r.calls_ops.empty() && r.calls_ops != emit::torch_unambiguous_name(schema->name()) &&
        schema->name().is_aten())
      diags.warning(r.location, fmt::format("the kernel registered for '{}' calls at::_ops::{}", display, r.calls_ops), r.length);
    policy::ResolvedEntry entry;
    entry.schema = schema;
    entry.op = display;
    entry.policy = r.policy;
    entry.message = r.message;
    entry.location = r.location;
    entry.length = r.length;
    if (r.policy == PolicyKind::fp32_append_dtype) {
      const model::FunctionSchema* target = nullptr;
      if (!r.redispatch_qualified.empty()) {
        const size_t colons = r.redispatch_qualified.find("::");
        target = schemas.find(r.redispatch_qualified.substr(0, colons), r.redispatch_qualified.substr(colons + 2));
      } else if (auto found = by_ops_struct.find(r.redispatch_ops); found != by_ops_struct.end()) {
        target = found->second;
      }
      if (!target) {
        diags.error(r.location,
                    fmt::format("'{}' redispatches to {}, which is not in the op schemas", display,
                                r.redispatch_qualified.empty() ? "at::_ops::" + r.redispatch_ops : r.redispatch_qualified),
                    r.length);
        continue;
      }
      entry.redispatch = target;
      entry.redispatch_op = target->name().display();
    }
    std::optional<policy::Rule> rule = imported_rule(r, *schema, diags);
    if (!rule) continue;
    entry.rule = std::move(*rule);
    // Entries of one wrapper with precision rules are registered at one place, one after another.
    // A plain entry may end a wrapper's chain after entries scoped to modules (Note [precision by place]).
    const auto after_scoped = [&] {
      const auto slot = snapshot_of_key.find(r.dispatch_key);
      return slot != snapshot_of_key.end() && !snapshots[slot->second].entries.empty() &&
             snapshots[slot->second].entries.back().schema == schema && !snapshots[slot->second].entries.back().rule.modules.empty();
    };
    if (auto [it, inserted] = seen.emplace(std::make_pair(r.dispatch_key, schema), &r); !inserted &&
        !(it->second->location.offset == r.location.offset && it->second->location.file == r.location.file &&
          (entry.rule.conditional() || after_scoped()))) {
      diags.error(r.location, fmt::format("'{}' is registered twice for {}", display, r.dispatch_key), r.length);
      diags.note(it->second->location, "first registered here", it->second->length);
      continue;
    }
    auto [slot, added] = snapshot_of_key.emplace(r.dispatch_key, snapshots.size());
    if (added) {
      policy::ResolvedPolicy s;
      s.source = policy::PolicySource::cpp;
      s.dispatch_key = r.dispatch_key;
      s.device = std::string(device->device);
      snapshots.push_back(std::move(s));
    }
    snapshots[slot->second].entries.push_back(std::move(entry));
  }
  // A block that registers nothing (or only fallthroughs) is an empty policy, said where it is.
  std::set<std::string> registering;  // keys with entries
  for (const auto& [key, index] : snapshot_of_key) registering.insert(key);
  for (const FoundBlock& block : blocks) {
    if (block.kernels > 0 || registering.count(block.dispatch_key)) continue;
    diags.note(block.location, block.fallthroughs == 0
                                   ? fmt::format("this TORCH_LIBRARY_IMPL block for {} registers no kernels; imported as an empty policy",
                                                 block.dispatch_key)
                                   : fmt::format("this TORCH_LIBRARY_IMPL block for {} registers only fallthroughs ({}), which leave "
                                                 "their ops unlisted; imported as an empty policy",
                                                 block.dispatch_key, block.fallthroughs));
    if (snapshot_of_key.emplace(block.dispatch_key, snapshots.size()).second) {
      policy::ResolvedPolicy s;
      s.source = policy::PolicySource::cpp;
      s.dispatch_key = block.dispatch_key;
      for (const policy::DeviceInfo& d : policy::autocast_devices())
        if (d.dispatch_key == block.dispatch_key) s.device = std::string(d.device);
      snapshots.push_back(std::move(s));
    }
  }
  // Note [precision by place]: a section belongs to the policy of its device.
  for (ImportedSections& imported : sections) {
    const auto policy = std::find_if(snapshots.begin(), snapshots.end(), [&](const policy::ResolvedPolicy& p) {
      return emit::torch_device_type(p.device) == imported.device_type;
    });
    if (policy == snapshots.end()) {
      diags.warning(imported.location,
                    fmt::format("a module section for device {}, which no autocast registration here is for; left out", imported.device_type));
    } else if (!policy->sections.empty() && policy->sections != imported.sections) {
      diags.error(imported.location, fmt::format("a second, different module section for {}", policy->dispatch_key));
    } else {
      policy->sections = std::move(imported.sections);
    }
  }
  return snapshots;
}

}  // namespace autocastgen::import::detail
