// Policy resolution: extends chains, remove, name/glob expansion, conflicts and per-policy rules.
#include "policy/resolver.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "policy/policy_file.h"
#include "support/strings.h"

namespace autocastgen::policy {

using model::FunctionSchema;

std::string display_name(const FunctionSchema& schema) {
  const model::OperatorName& name = schema.name();
  return name.ns.empty() || name.ns == model::kDefaultNamespace ? name.unqualified() : name.str();
}

std::optional<std::vector<PolicyFile>> load_policy_chain(const std::filesystem::path& path, SourceManager& sources,
                                                         DiagnosticEngine& diags) {
  constexpr size_t kMaxDepth = 64;
  std::vector<PolicyFile> chain;
  std::vector<std::pair<std::filesystem::path, uint32_t>> visited;  // canonical path, file id
  std::filesystem::path current = path;
  SourceLocation included_from;
  while (true) {
    std::error_code ec;
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(current, ec);
    for (const auto& [seen, file] : visited) {
      if (seen == canonical) {
        std::string cycle;
        bool in_cycle = false;
        for (const auto& [p, f] : visited) {
          if (p == canonical) in_cycle = true;
          if (in_cycle) cycle += sources.name(f) + " -> ";
        }
        diags.error(included_from, fmt::format("'extends:' cycle: {}{}", cycle, sources.name(file)));
        return std::nullopt;
      }
    }
    if (visited.size() >= kMaxDepth) {
      diags.error(included_from, fmt::format("'extends:' chain is deeper than {} files", kMaxDepth));
      return std::nullopt;
    }
    std::string error;
    std::optional<uint32_t> file = sources.add_file(current, error);
    if (!file) {
      if (included_from.valid())
        diags.error(included_from, fmt::format("cannot read extended policy '{}': {}", current.string(), error));
      else
        diags.error({}, fmt::format("cannot read policy '{}': {}", current.string(), error));
      return std::nullopt;
    }
    visited.emplace_back(canonical, *file);
    std::optional<PolicyFile> parsed = parse_policy_file(sources, *file, diags);
    if (!parsed) return std::nullopt;
    chain.push_back(std::move(*parsed));
    const PolicyFile& last = chain.back();
    if (!last.extends) break;
    included_from = last.extends->location;
    current = current.parent_path() / last.extends->text;
  }
  return chain;
}

namespace {

// Do `to`'s arguments equal `from`'s plus a trailing `ScalarType dtype`? Types may widen to
// optional (a `Scalar` argument passes to a `Scalar?` parameter); names must match.
bool takes_trailing_dtype(const FunctionSchema& from, const FunctionSchema& to) {
  const auto& a = from.arguments();
  const auto& b = to.arguments();
  if (b.size() != a.size() + 1) return false;
  if (b.back().name != "dtype" || !b.back().type.is_base(model::BaseTy::ScalarType)) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name) return false;
    const bool widened = b[i].type.kind() == model::Type::Kind::optional && b[i].type.elem() == a[i].type;
    if (!(a[i].type == b[i].type) && !widened) return false;
  }
  return true;
}

class Resolver {
 public:
  Resolver(const model::SchemaSet& schemas, DiagnosticEngine& diags) : schemas_(schemas), diags_(diags) {}

  std::optional<ResolvedPolicy> run(const std::vector<PolicyFile>& chain) {
    const size_t errors_before = diags_.error_count();
    // Bases first, so each file sees what it inherits.
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      apply_header(*it);
      apply_file(*it);
      file_index_++;
    }
    finish_header(chain.front());
    if (diags_.error_count() != errors_before) return std::nullopt;
    for (const PolicyFile& f : chain) result_.files.push_back(f.file);
    for (Slot& slot : slots_)
      if (!slot.removed) result_.entries.push_back(std::move(slot.entry));
    return std::move(result_);
  }

 private:
  struct Slot {
    ResolvedEntry entry;
    size_t file_index;  // position in the bases-first order
    bool removed = false;
  };

  void apply_header(const PolicyFile& file) {
    if (file.device) {
      device_ = *file.device;
      // A new device brings its own key unless the same file names one.
      dispatch_key_ = file.dispatch_key;
    } else if (file.dispatch_key) {
      dispatch_key_ = file.dispatch_key;
    }
    if (file.lower_precision) {
      result_.lower_precision.clear();
      for (const Located& dtype : *file.lower_precision) result_.lower_precision.push_back(dtype.text);
    }
  }

  void finish_header(const PolicyFile& requested) {
    if (!device_) {
      diags_.error({requested.file, 0}, "no 'autocast: device:' in this policy or in the files it extends");
      return;
    }
    const auto& devices = autocast_devices();
    const auto info = std::find_if(devices.begin(), devices.end(), [&](const DeviceInfo& d) { return d.device == device_->text; });
    result_.device = device_->text;
    result_.dispatch_key = dispatch_key_ ? dispatch_key_->text : std::string(info->dispatch_key);
    if (dispatch_key_ && dispatch_key_->text != info->dispatch_key)
      diags_.warning(dispatch_key_->location,
                     fmt::format("dispatch key '{}' is not the autocast key of device '{}' ({})", dispatch_key_->text,
                                 device_->text, info->dispatch_key),
                     dispatch_key_->length);
    if (result_.lower_precision.empty()) {
      result_.lower_precision.emplace_back(info->default_dtype);
      result_.lower_precision.emplace_back(info->default_dtype == "float16" ? "bfloat16" : "float16");
    }
  }

  // The overloads a pattern names; reports unknown names and ineligible overloads.
  std::vector<const FunctionSchema*> expand(const Located& op, bool for_remove) {
    const std::optional<OpPattern> pattern = parse_op_pattern(op.text);
    const std::vector<const FunctionSchema*> overloads = schemas_.overloads(pattern->ns, pattern->name);
    if (overloads.empty()) {
      const std::string suggestion = closest_match(pattern->name, schemas_.operator_names(pattern->ns));
      const std::string qualified = pattern->ns.empty() ? pattern->name : pattern->ns + "::" + pattern->name;
      diags_.error(op.location,
                   suggestion.empty() ? fmt::format("unknown op '{}'", qualified)
                                      : fmt::format("unknown op '{}'; did you mean '{}{}'?", qualified,
                                                    pattern->ns.empty() ? "" : pattern->ns + "::", suggestion),
                   op.length);
      return {};
    }
    std::vector<const FunctionSchema*> result;
    if (pattern->all_overloads) {
      for (const FunctionSchema* schema : overloads)
        if (for_remove || model::is_autocast_eligible(*schema)) result.push_back(schema);
      if (result.empty())
        diags_.error(op.location,
                     fmt::format("'{}' matches no eligible overload: all {} overloads of '{}' are in-place, out=, mutable "
                                 "or without a Tensor input",
                                 op.text, overloads.size(), pattern->name),
                     op.length);
      return result;
    }
    const FunctionSchema* schema = schemas_.find(pattern->ns, pattern->overload.empty() ? pattern->name
                                                                                       : pattern->name + "." + pattern->overload);
    if (!schema) {
      // Suggest what could be written here: eligible overloads, or all of them for `remove:`.
      std::vector<std::string> names;
      for (const FunctionSchema* s : overloads)
        if (for_remove || model::is_autocast_eligible(*s)) names.push_back(display_name(*s));
      std::sort(names.begin(), names.end());  // the same list whatever order the schemas came in
      std::vector<std::string_view> views(names.begin(), names.end());
      if (pattern->overload.empty()) {
        diags_.error(op.location,
                     names.empty() ? fmt::format("'{}' has no default overload, and none of its overloads can autocast", op.text)
                                   : fmt::format("'{}' has no default overload; write one of: {}, or '{}.*'", op.text,
                                                 fmt::join(names, ", "), op.text),
                     op.length);
      } else {
        const std::string suggestion = closest_match(op.text, views);
        diags_.error(op.location,
                     suggestion.empty() ? names.empty() ? fmt::format("unknown overload '{}'", op.text) : fmt::format("unknown overload '{}' (overloads: {})", op.text, fmt::join(names, ", "))
                                        : fmt::format("unknown overload '{}'; did you mean '{}'?", op.text, suggestion),
                     op.length);
      }
      return {};
    }
    std::string reason;
    if (!for_remove && !model::is_autocast_eligible(*schema, &reason)) {
      diags_.error(op.location, fmt::format("'{}' cannot autocast: {}", op.text, reason), op.length);
      return {};
    }
    return {schema};
  }

  void apply_file(const PolicyFile& file) {
    // remove: drops inherited entries.
    for (const Located& op : file.remove) {
      if (file_index_ == 0) {
        diags_.error(op.location, "'remove:' drops inherited entries, but this policy extends nothing", op.length);
        continue;
      }
      const std::vector<const FunctionSchema*> targets = expand(op, /*for_remove=*/true);
      size_t removed = 0;
      for (const FunctionSchema* schema : targets) {
        auto it = index_.find(schema);
        if (it == index_.end() || slots_[it->second].removed) continue;
        slots_[it->second].removed = true;
        index_.erase(it);
        ++removed;
      }
      if (!targets.empty() && removed == 0)
        diags_.error(op.location, fmt::format("'{}' is in none of the inherited lists; nothing to remove", op.text), op.length);
    }
    for (const PolicyEntry& entry : file.entries) {
      for (const FunctionSchema* schema : expand(entry.op, /*for_remove=*/false)) add(file, entry, *schema);
    }
  }

  void add(const PolicyFile& file, const PolicyEntry& entry, const FunctionSchema& schema) {
    ResolvedEntry resolved{&schema,           entry.policy,      nullptr, entry.message ? entry.message->text : std::string(),
                           entry.op.location, entry.op.length};
    if (entry.policy == PolicyKind::fp32_set_opt_dtype) {
      const model::Argument* dtype = schema.find_argument("dtype");
      if (!dtype || !dtype->type.is_optional_scalar_type()) {
        diags_.error(entry.op.location,
                     fmt::format("fp32_set_opt_dtype needs an argument 'ScalarType? dtype', and '{}' has none", display_name(schema)),
                     entry.op.length);
        return;
      }
    }
    if (entry.policy == PolicyKind::fp32_append_dtype) {
      resolved.redispatch = find_redispatch(entry, schema);
      if (!resolved.redispatch) return;
    }
    if (auto it = index_.find(&schema); it != index_.end()) {
      report_duplicate(slots_[it->second], entry, schema);
      return;
    }
    index_.emplace(&schema, slots_.size());
    slots_.push_back({std::move(resolved), file_index_});
  }

  // The same overload listed twice: redundant in the same policy, a conflict in another one.
  void report_duplicate(const Slot& existing, const PolicyEntry& entry, const FunctionSchema& schema) {
    const std::string name = display_name(schema);
    const bool same_file = existing.file_index == file_index_;
    if (existing.entry.policy == entry.policy) {
      diags_.warning(entry.op.location,
                     same_file ? fmt::format("redundant entry: '{}' is already listed in {}", name, spelling(entry.policy))
                               : fmt::format("redundant entry: '{}' is already inherited in {}", name, spelling(entry.policy)),
                     entry.op.length);
      diags_.note(existing.entry.location, "listed here", existing.entry.length);
    } else if (same_file) {
      diags_.error(entry.op.location,
                   fmt::format("'{}' is listed in both {} and {}", name, spelling(existing.entry.policy), spelling(entry.policy)),
                   entry.op.length);
      diags_.note(existing.entry.location, fmt::format("listed in {} here", spelling(existing.entry.policy)),
                  existing.entry.length);
    } else {
      diags_.error(entry.op.location,
                   fmt::format("'{}' is inherited as {}; list it under 'remove:' to give it another policy", name,
                               spelling(existing.entry.policy)),
                   entry.op.length);
      diags_.note(existing.entry.location, "inherited from here", existing.entry.length);
    }
  }

  const FunctionSchema* find_redispatch(const PolicyEntry& entry, const FunctionSchema& schema) {
    const std::string name = display_name(schema);
    if (entry.redispatch) {
      const std::optional<OpPattern> pattern = parse_op_pattern(entry.redispatch->text);
      const FunctionSchema* target =
          pattern->all_overloads ? nullptr
                                 : schemas_.find(pattern->ns, pattern->overload.empty() ? pattern->name : pattern->name + "." + pattern->overload);
      if (!target) {
        diags_.error(entry.redispatch->location, fmt::format("unknown redispatch overload '{}'", entry.redispatch->text),
                     entry.redispatch->length);
        return nullptr;
      }
      if (!takes_trailing_dtype(schema, *target)) {
        diags_.error(entry.redispatch->location,
                     fmt::format("redispatch target '{}' does not take the arguments of '{}' plus a trailing 'ScalarType dtype'",
                                 entry.redispatch->text, name),
                     entry.redispatch->length);
        return nullptr;
      }
      return target;
    }
    std::vector<const FunctionSchema*> candidates;
    for (const FunctionSchema* sibling : schemas_.overloads(schema.name().ns, schema.name().name))
      if (model::is_autocast_eligible(*sibling) && takes_trailing_dtype(schema, *sibling)) candidates.push_back(sibling);
    if (candidates.size() == 1) return candidates.front();
    if (candidates.empty()) {
      diags_.error(entry.op.location,
                   fmt::format("fp32_append_dtype: no overload of '{}' takes the arguments of '{}' plus a trailing "
                               "'ScalarType dtype'; name one with 'redispatch:'",
                               schema.name().name, name),
                   entry.op.length);
    } else {
      std::vector<std::string> names;
      for (const FunctionSchema* c : candidates) names.push_back(display_name(*c));
      diags_.error(entry.op.location,
                   fmt::format("fp32_append_dtype: several overloads could take the dtype for '{}' ({}); pick one with 'redispatch:'",
                               name, fmt::join(names, ", ")),
                   entry.op.length);
    }
    return nullptr;
  }

  const model::SchemaSet& schemas_;
  DiagnosticEngine& diags_;
  ResolvedPolicy result_;
  std::optional<Located> device_;
  std::optional<Located> dispatch_key_;
  std::vector<Slot> slots_;
  std::unordered_map<const FunctionSchema*, size_t> index_;
  size_t file_index_ = 0;
};

}  // namespace

std::optional<ResolvedPolicy> resolve_policy(const std::vector<PolicyFile>& chain, const model::SchemaSet& schemas,
                                             DiagnosticEngine& diags) {
  if (chain.empty()) return std::nullopt;
  return Resolver(schemas, diags).run(chain);
}

std::optional<ResolvedPolicy> load_policy(const std::filesystem::path& path, const model::SchemaSet& schemas,
                                          SourceManager& sources, DiagnosticEngine& diags) {
  std::optional<std::vector<PolicyFile>> chain = load_policy_chain(path, sources, diags);
  if (!chain) return std::nullopt;
  return resolve_policy(*chain, schemas, diags);
}

}  // namespace autocastgen::policy
