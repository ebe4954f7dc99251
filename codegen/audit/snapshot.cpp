// Snapshots of policies from resolved policy files and from generated manifests.
#include "audit/snapshot.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "audit/json.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "support/strings.h"

namespace autocastgen::audit {

namespace fs = std::filesystem;
using policy::PolicyKind;

std::string_view spelling(InputKind kind) {
  switch (kind) {
    case InputKind::policy: return "policy";
    case InputKind::manifest: return "manifest";
    case InputKind::cpp: return "C++";
  }
  return "policy";
}

std::optional<InputKind> input_kind(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".yaml" || ext == ".yml") return InputKind::policy;
  if (ext == ".json") return InputKind::manifest;
  static constexpr std::string_view kCpp[] = {".cpp", ".cc", ".cxx", ".c++", ".cu", ".h", ".hh", ".hpp", ".hxx", ".inl"};
  if (std::find(std::begin(kCpp), std::end(kCpp), ext) != std::end(kCpp)) return InputKind::cpp;
  return std::nullopt;
}

size_t PolicySnapshot::count(PolicyKind kind) const {
  return static_cast<size_t>(std::count_if(entries.begin(), entries.end(), [&](const SnapshotEntry& e) { return e.policy == kind; }));
}

const SnapshotEntry* PolicySnapshot::find(std::string_view op) const {
  for (const SnapshotEntry& e : entries)
    if (e.op == op) return &e;
  return nullptr;
}


std::string location_text(const SourceManager& sources, SourceLocation location) {
  if (!location.valid()) return "";
  const LineColumn lc = sources.line_column(location);
  return fmt::format("{}:{}:{}", display_path(sources.name(location.file)), lc.line, lc.column);
}

PolicySnapshot snapshot_of(const policy::ResolvedPolicy& resolved, std::string name) {
  PolicySnapshot snapshot;
  snapshot.kind = InputKind::policy;
  snapshot.name = std::move(name);
  snapshot.device = resolved.device;
  snapshot.dispatch_key = resolved.dispatch_key;
  snapshot.lower_precision = resolved.lower_precision;
  for (const policy::ResolvedEntry& entry : resolved.entries) {
    SnapshotEntry e{policy::display_name(*entry.schema), entry.policy, {}, {}, entry.location, entry.length, entry.schema};
    if (entry.redispatch) e.redispatch = policy::display_name(*entry.redispatch);
    if (entry.policy == PolicyKind::banned) e.message = entry.message;
    snapshot.entries.push_back(std::move(e));
  }
  return snapshot;
}

namespace {

class ManifestReader {
 public:
  ManifestReader(const model::SchemaSet& schemas, DiagnosticEngine& diags) : schemas_(schemas), diags_(diags) {}

  std::optional<PolicySnapshot> run(const JsonValue& root, PolicySnapshot snapshot) {
    const size_t errors_before = diags_.error_count();
    if (!root.is_object()) {
      diags_.error(root.location(), fmt::format("a manifest is a JSON object with 'device', 'dispatch_key' and 'ops'; found {}",
                                                root.describe()));
      return std::nullopt;
    }
    snapshot.device = required_string(root, "device");
    snapshot.dispatch_key = required_string(root, "dispatch_key");
    if (!snapshot.device.empty() && !known_device(snapshot.device))
      diags_.error(root.find("device")->location(), fmt::format("unknown device '{}'", snapshot.device), root.find("device")->length());
    if (const JsonValue* dtypes = root.find("lower_precision")) {
      if (!dtypes->is_array()) {
        diags_.error(dtypes->location(), fmt::format("'lower_precision' must be an array of dtype names, found {}", dtypes->describe()));
      } else {
        for (const JsonValue& d : dtypes->items()) {
          if (d.is_string()) snapshot.lower_precision.push_back(d.text());
          else diags_.error(d.location(), fmt::format("a dtype name must be a string, found {}", d.describe()));
        }
      }
    }
    const JsonValue* ops = root.find("ops");
    if (!ops) {
      diags_.error(root.location(), "the manifest has no 'ops' array");
    } else if (!ops->is_array()) {
      diags_.error(ops->location(), fmt::format("'ops' must be an array of objects, found {}", ops->describe()));
    } else {
      std::unordered_map<std::string, const JsonValue*> seen;
      for (const JsonValue& item : ops->items()) read_op(item, snapshot, seen);
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return snapshot;
  }

 private:
  static bool known_device(const std::string& device) {
    const auto& devices = policy::autocast_devices();
    return std::any_of(devices.begin(), devices.end(), [&](const policy::DeviceInfo& d) { return d.device == device; });
  }

  std::string required_string(const JsonValue& object, std::string_view key) {
    const JsonValue* value = object.find(key);
    if (!value) {
      diags_.error(object.location(), fmt::format("missing member '{}'", key));
      return {};
    }
    if (!value->is_string()) {
      diags_.error(value->location(), fmt::format("'{}' must be a string, found {}", key, value->describe()), value->length());
      return {};
    }
    return value->text();
  }

  const JsonValue* optional_string(const JsonValue& object, std::string_view key) {
    const JsonValue* value = object.find(key);
    if (value && !value->is_string()) {
      diags_.error(value->location(), fmt::format("'{}' must be a string, found {}", key, value->describe()), value->length());
      return nullptr;
    }
    return value;
  }

  // Checks an overload name's syntax and finds it in the schemas (a warning when absent).
  const model::FunctionSchema* lookup(const JsonValue& name, bool warn_unknown) {
    const std::optional<policy::OpPattern> pattern = policy::parse_op_pattern(name.text());
    if (!pattern || pattern->all_overloads) {
      diags_.error(name.location(), fmt::format("malformed overload name '{}'; expected name or name.overload (optionally ns::name)", name.text()),
                   name.length());
      return nullptr;
    }
    const model::FunctionSchema* schema =
        schemas_.find(pattern->ns, pattern->overload.empty() ? pattern->name : pattern->name + "." + pattern->overload);
    if (!schema && warn_unknown) {
      const std::string suggestion = closest_match(pattern->name, schemas_.operator_names(pattern->ns));
      diags_.warning(name.location(),
                     fmt::format("'{}' is not in the op schemas{}; was the manifest generated from another PyTorch? (give "
                                 "--schemas for each input)",
                                 name.text(), suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion)),
                     name.length());
    }
    return schema;
  }

  void read_op(const JsonValue& item, PolicySnapshot& snapshot, std::unordered_map<std::string, const JsonValue*>& seen) {
    if (!item.is_object()) {
      diags_.error(item.location(), fmt::format("each entry of 'ops' must be an object with 'op' and 'policy', found {}", item.describe()));
      return;
    }
    const JsonValue* op = item.find("op");
    const JsonValue* policy_name = item.find("policy");
    if (!op || !policy_name) {
      diags_.error(item.location(), fmt::format("an 'ops' entry needs '{}'", !op ? "op" : "policy"));
      return;
    }
    if (!op->is_string() || !policy_name->is_string()) {
      const JsonValue* bad = !op->is_string() ? op : policy_name;
      diags_.error(bad->location(), fmt::format("'{}' must be a string, found {}", bad == op ? "op" : "policy", bad->describe()),
                   bad->length());
      return;
    }
    const std::optional<PolicyKind> kind = policy::parse_policy_kind(policy_name->text());
    if (!kind) {
      std::vector<std::string_view> names;
      for (PolicyKind p : policy::kAllPolicies) names.push_back(policy::spelling(p));
      const std::string suggestion = closest_match(policy_name->text(), names);
      diags_.error(policy_name->location(),
                   suggestion.empty() ? fmt::format("unknown policy '{}'", policy_name->text())
                                      : fmt::format("unknown policy '{}'; did you mean '{}'?", policy_name->text(), suggestion),
                   policy_name->length());
      return;
    }
    SnapshotEntry entry{op->text(), *kind, {}, {}, op->location(), op->length(), lookup(*op, true)};
    if (entry.schema) entry.op = policy::display_name(*entry.schema);  // `aten::mm` -> `mm`
    const JsonValue* redispatch = optional_string(item, "redispatch");
    const JsonValue* message = optional_string(item, "message");
    if (*kind == PolicyKind::fp32_append_dtype) {
      if (!redispatch) diags_.error(item.location(), "an fp32_append_dtype entry needs 'redispatch' (the overload it calls)");
      else if (const model::FunctionSchema* target = lookup(*redispatch, false)) entry.redispatch = policy::display_name(*target);
      else entry.redispatch = redispatch->text();  // from another PyTorch, or malformed (reported)
    } else if (redispatch) {
      diags_.error(redispatch->location(), fmt::format("'redispatch' belongs to fp32_append_dtype entries, not {}", policy_name->text()),
                   redispatch->length());
    }
    if (*kind == PolicyKind::banned) {
      if (!message) diags_.error(item.location(), "a banned entry needs 'message'");
      else entry.message = message->text();
    } else if (message) {
      diags_.error(message->location(), fmt::format("'message' belongs to banned entries, not {}", policy_name->text()), message->length());
    }
    if (auto [it, inserted] = seen.emplace(entry.op, op); !inserted) {
      diags_.error(op->location(), fmt::format("'{}' is listed twice", entry.op), op->length());
      diags_.note(it->second->location(), "first listed here", it->second->length());
      return;
    }
    snapshot.entries.push_back(std::move(entry));
  }

  const model::SchemaSet& schemas_;
  DiagnosticEngine& diags_;
};

}  // namespace

std::optional<PolicySnapshot> read_manifest(uint32_t file, std::string name, const model::SchemaSet& schemas,
                                            const SourceManager& sources, DiagnosticEngine& diags) {
  std::optional<JsonValue> root = parse_json(sources, file, diags);
  if (!root) return std::nullopt;
  PolicySnapshot snapshot;
  snapshot.kind = InputKind::manifest;
  snapshot.name = std::move(name);
  return ManifestReader(schemas, diags).run(*root, std::move(snapshot));
}

}  // namespace autocastgen::audit
