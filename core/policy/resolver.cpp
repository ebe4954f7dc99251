// Policy resolution: extends chains, remove, name/glob expansion, conflicts and per-policy rules.
#include "policy/resolver.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "policy/policy_file.h"
#include "support/strings.h"
#include "support/yaml.h"

namespace autocastgen::policy {

using model::FunctionSchema;

// Note [the files a chain read]
// One reader follows `extends:`: this one. What a result depends on is the files it read: the
// generator's --depfile and --input-list name them (ResolvedPolicy::files), `check --files` prints
// them (compile_policy hashes them into its cache key, so a base file that changes gives a new
// key), and load_policy's YAML text is read here too, with the folder its relative `extends:` is
// read from, so that no other code reads a policy's YAML to find its base. A chain that stops
// on an error has read the files up to the one that had it; those are the ones `read` names.

namespace {

constexpr size_t kMaxDepth = 64;

// Follows `extends:` from `chain`'s last policy (whose own base is `next`), reading each file.
std::optional<std::vector<PolicyFile>> follow_chain(std::vector<PolicyFile> chain, std::filesystem::path next,
                                                    SourceManager& sources, DiagnosticEngine& diags,
                                                    std::vector<std::filesystem::path>* read) {
  std::vector<std::pair<std::filesystem::path, uint32_t>> visited;  // canonical path, file id
  std::filesystem::path current = std::move(next);
  SourceLocation included_from = chain.empty() ? SourceLocation{} : chain.back().extends->location;
  while (true) {
    if (included_from.valid() && current.native().find('\0') != std::string::npos) {
      // A YAML escape (`"\0"`) can put one in the text; the operating system would cut the path there.
      diags.error(included_from, "'extends:' names a path holding a NUL byte, which no file can have");
      return std::nullopt;
    }
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
    if (chain.size() >= kMaxDepth) {
      diags.error(included_from, fmt::format("'extends:' chain is deeper than {} files", kMaxDepth));
      return std::nullopt;
    }
    std::string error;
    std::optional<uint32_t> file = sources.add_file(current, error, kMaxPolicyFileBytes, "policy files");
    if (!file) {
      if (included_from.valid())
        diags.error(included_from, fmt::format("cannot read extended policy '{}': {}", current.string(), error));
      else
        diags.error({}, fmt::format("cannot read policy '{}': {}", current.string(), error));
      return std::nullopt;
    }
    if (read != nullptr) read->push_back(current);
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

}  // namespace

std::optional<std::vector<PolicyFile>> load_policy_chain(const std::filesystem::path& path, SourceManager& sources,
                                                         DiagnosticEngine& diags, std::vector<std::filesystem::path>* read) {
  return follow_chain({}, path, sources, diags, read);
}

std::optional<std::vector<PolicyFile>> load_policy_chain(const PolicyText& text, SourceManager& sources,
                                                         DiagnosticEngine& diags, std::vector<std::filesystem::path>* read) {
  if (text.text.size() > kMaxPolicyFileBytes) {  // as a file that large is refused, before it is copied
    diags.error({}, fmt::format("cannot read policy '{}': {}", text.name, input_too_large(kMaxPolicyFileBytes, "policy files")));
    return std::nullopt;
  }
  std::optional<PolicyFile> parsed = parse_policy_file(sources, sources.add_buffer(text.name, text.text), diags);
  if (!parsed) return std::nullopt;
  std::vector<PolicyFile> chain;
  chain.push_back(std::move(*parsed));
  if (!chain.back().extends) return chain;
  std::filesystem::path base = text.base / chain.back().extends->text;
  return follow_chain(std::move(chain), std::move(base), sources, diags, read);
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

// Note [precision rules]: what a rule names, checked against the overload's schema; without one
// (a manifest's op that the schemas at hand lack) values are read by their spelling.
class RuleResolver {
 public:
  explicit RuleResolver(DiagnosticEngine& diags) : diags_(diags) {}

  std::optional<Rule> resolve(const PolicyEntry& entry, const FunctionSchema* schema) {
    if (!schema) return unchecked(entry);
    Rule rule;
    bool ok = true;
    if (entry.dtypes)
      for (const Located& dtype : *entry.dtypes) rule.dtypes.push_back(dtype.text);
    if (entry.modules)
      for (const Located& pattern : *entry.modules) rule.modules.push_back(pattern.text);
    for (const auto& [written, resolved] : {std::pair{&entry.when, &rule.when}, std::pair{&entry.unless, &rule.unless}})
      for (const WrittenCondition& condition : *written) {
        std::optional<ArgCondition> checked = resolve_condition(condition, *schema, written == &entry.when ? "when" : "unless");
        if (checked) resolved->push_back(std::move(*checked));
        else ok = false;
      }
    for (const WrittenArgCast& cast : entry.args) {
      const std::optional<size_t> index = argument_index(cast.arg, *schema, /*tensors=*/true);
      if (!index) {
        ok = false;
        continue;
      }
      const model::Argument& argument = schema->arguments()[*index];
      if (!argument.type.is_tensor_like()) {
        diags_.error(cast.arg.location,
                     fmt::format("'args:' names '{}', a {} argument of '{}'; it sets what Tensor arguments are cast to", cast.arg.text,
                                 argument.type.str(), schema->name().display()),
                     cast.arg.length);
        ok = false;
        continue;
      }
      rule.args.push_back({cast.arg.text, *index, cast.cast});
    }
    if (!ok) return std::nullopt;
    return rule;
  }

  // The position of a named argument; reports an unknown name with the names it could have been
  // (the Tensor ones for `args:`, the others for conditions).
  std::optional<size_t> argument_index(const Located& name, const FunctionSchema& schema, bool tensors) {
    const auto& arguments = schema.arguments();
    for (size_t i = 0; i < arguments.size(); ++i)
      if (arguments[i].name == name.text) return i;
    std::vector<std::string_view> names;
    for (const model::Argument& a : arguments)
      if (a.type.is_tensor_like() == tensors) names.push_back(a.name);
    const std::string suggestion = closest_match(name.text, names);
    diags_.error(name.location,
                 suggestion.empty()
                     ? fmt::format("'{}' has no argument '{}' ({} arguments: {})", schema.name().display(), name.text,
                                   tensors ? "its Tensor" : "its non-Tensor", names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")))
                     : fmt::format("'{}' has no argument '{}'; did you mean '{}'?", schema.name().display(), name.text, suggestion),
                 name.length);
    return std::nullopt;
  }

  std::optional<ArgCondition> resolve_condition(const WrittenCondition& written, const FunctionSchema& schema, std::string_view key) {
    const std::optional<size_t> index = argument_index(written.arg, schema, /*tensors=*/false);
    if (!index) return std::nullopt;
    const model::Argument& argument = schema.arguments()[*index];
    const bool optional = argument.type.kind() == model::Type::Kind::optional;
    const model::Type& type = optional ? argument.type.elem() : argument.type;
    if (argument.type.is_tensor_like()) {
      diags_.error(written.arg.location,
                   fmt::format("'{}:' names '{}', a Tensor argument of '{}'; conditions compare non-Tensor arguments with values",
                               key, written.arg.text, schema.name().display()),
                   written.arg.length);
      return std::nullopt;
    }
    if (type.kind() != model::Type::Kind::base || !comparable(type.base_ty())) {
      diags_.error(written.arg.location,
                   fmt::format("'{}:' cannot compare '{}' ({}): conditions take int, SymInt, float, bool, str, Scalar and ScalarType "
                               "arguments, and optional ones",
                               key, written.arg.text, argument.type.str()),
                   written.arg.length);
      return std::nullopt;
    }
    ArgCondition condition{written.arg.text, *index, {}};
    for (const std::optional<Located>& value : written.values) {
      if (!value) {
        if (!optional) {
          diags_.error(written.null_location,
                       fmt::format("'{}' ({}) of '{}' is never null; only optional arguments can be", written.arg.text,
                                   argument.type.str(), schema.name().display()));
          return std::nullopt;
        }
        condition.values.push_back({RuleValue::Kind::none, false, 0, 0, "", "null"});
        continue;
      }
      std::optional<RuleValue> parsed = rule_value(*value, type.base_ty(), argument.name);
      if (!parsed) {
        diags_.error(value->location,
                     fmt::format("'{}' is not a value of '{}' ({}){}", value->text, written.arg.text, argument.type.str(),
                                 value_hint(type.base_ty(), argument.name)),
                     value->length);
        return std::nullopt;
      }
      if (std::find(condition.values.begin(), condition.values.end(), *parsed) != condition.values.end()) {
        diags_.error(value->location, fmt::format("'{}' is given twice for '{}'", value->text, written.arg.text), value->length);
        return std::nullopt;
      }
      condition.values.push_back(std::move(*parsed));
    }
    return condition;
  }

  static bool comparable(model::BaseTy base) {
    using model::BaseTy;
    return base == BaseTy::Int || base == BaseTy::SymInt || base == BaseTy::Float || base == BaseTy::Bool ||
           base == BaseTy::Str || base == BaseTy::Scalar || base == BaseTy::ScalarType;
  }

  static std::string value_hint(model::BaseTy base, const std::string& arg) {
    using model::BaseTy;
    switch (base) {
      case BaseTy::Int:
      case BaseTy::SymInt:
        return arg == "reduction" ? "; write none, mean or sum" : "; write an integer";
      case BaseTy::Float: return "; write a number, .inf, -.inf or .nan";
      case BaseTy::Scalar: return "; write a number, .inf, -.inf, .nan, true or false";
      case BaseTy::Bool: return "; write true or false";
      case BaseTy::ScalarType: {
        std::vector<std::string_view> names;
        for (const DtypeName& d : dtype_names()) names.push_back(d.name);
        return fmt::format("; write a dtype name: {}", fmt::join(names, ", "));
      }
      default: return "";
    }
  }

  // A literal read for its argument's type (Note [precision rules]).
  static std::optional<RuleValue> rule_value(const Located& value, model::BaseTy base, const std::string& arg) {
    using model::BaseTy;
    const std::string& t = value.text;
    RuleValue out;
    const auto boolean = [&]() -> bool {
      if (t == "true" || t == "True" || t == "TRUE") out.boolean = true;
      else if (!(t == "false" || t == "False" || t == "FALSE")) return false;
      out.kind = RuleValue::Kind::boolean;
      out.spelling = out.boolean ? "true" : "false";
      return true;
    };
    const auto integer = [&]() -> bool {
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size()) return false;
      out.kind = RuleValue::Kind::integer;
      out.integer = v;
      out.spelling = std::to_string(v);
      return true;
    };
    const auto real = [&]() -> bool {
      static const std::pair<std::string_view, double> kSpecial[] = {
          {".inf", INFINITY}, {".Inf", INFINITY}, {".INF", INFINITY}, {"+.inf", INFINITY}, {"inf", INFINITY},
          {"-.inf", -INFINITY}, {"-.Inf", -INFINITY}, {"-.INF", -INFINITY}, {"-inf", -INFINITY},
          {".nan", NAN}, {".NaN", NAN}, {".NAN", NAN}, {"nan", NAN}};
      out.kind = RuleValue::Kind::real;
      for (const auto& [spelled, v] : kSpecial)
        if (t == spelled) {
          out.real = v;
          out.spelling = std::isnan(v) ? ".nan" : v > 0 ? ".inf" : "-.inf";
          return true;
        }
      double v = 0;
      const char* begin = t.data() + (t.starts_with('+') ? 1 : 0);
      const auto [end, ec] = std::from_chars(begin, t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size() || t.empty() || !std::isfinite(v)) return false;
      out.real = v;
      out.spelling = fmt::format("{}", v);
      if (out.spelling.find_first_of(".e") == std::string::npos) out.spelling += ".0";
      return true;
    };
    switch (base) {
      case BaseTy::Int:
      case BaseTy::SymInt:
        if (arg == "reduction") {
          // at::Reduction: None, Mean, Sum.
          static constexpr std::string_view kReductions[] = {"none", "mean", "sum"};
          for (size_t i = 0; i < 3; ++i)
            if (t == kReductions[i]) return RuleValue{RuleValue::Kind::integer, false, static_cast<int64_t>(i), 0, "", std::string(t)};
          if (integer() && out.integer >= 0 && out.integer < 3) {
            out.spelling = std::string(kReductions[out.integer]);
            return out;
          }
          return std::nullopt;
        }
        return integer() ? std::optional(out) : std::nullopt;
      case BaseTy::Float: return integer() || real() ? std::optional(out) : std::nullopt;
      case BaseTy::Scalar: return integer() || real() || boolean() ? std::optional(out) : std::nullopt;
      case BaseTy::Bool: return boolean() ? std::optional(out) : std::nullopt;
      case BaseTy::Str: {
        out.kind = RuleValue::Kind::text;
        out.text = t;
        const bool plain = !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }) &&
                           !std::isdigit(static_cast<unsigned char>(t[0])) && t != "null" && t != "true" && t != "false";
        out.spelling = plain ? t : yaml_quoted(t);
        return out;
      }
      case BaseTy::ScalarType:
        for (const DtypeName& d : dtype_names())
          if (d.name == t) return RuleValue{RuleValue::Kind::dtype, false, d.code, 0, std::string(d.name), std::string(d.name)};
        return std::nullopt;
      default: return std::nullopt;
    }
  }

 private:
  // A manifest's rule for an op the schemas lack: values by spelling, no argument positions.
  static Rule unchecked(const PolicyEntry& entry) {
    Rule rule;
    if (entry.dtypes)
      for (const Located& dtype : *entry.dtypes) rule.dtypes.push_back(dtype.text);
    if (entry.modules)
      for (const Located& pattern : *entry.modules) rule.modules.push_back(pattern.text);
    for (const auto& [written, out] : {std::pair{&entry.when, &rule.when}, std::pair{&entry.unless, &rule.unless}})
      for (const WrittenCondition& condition : *written) {
        ArgCondition c{condition.arg.text, 0, {}};
        for (const std::optional<Located>& value : condition.values) {
          if (!value) {
            c.values.push_back({RuleValue::Kind::none, false, 0, 0, "", "null"});
            continue;
          }
          std::optional<RuleValue> parsed;
          for (const model::BaseTy base : {model::BaseTy::Scalar, model::BaseTy::ScalarType}) {
            if (!parsed) parsed = rule_value(*value, base, condition.arg.text);
          }
          if (!parsed) parsed = rule_value(*value, model::BaseTy::Str, condition.arg.text);
          c.values.push_back(std::move(*parsed));
        }
        out->push_back(std::move(c));
      }
    for (const WrittenArgCast& cast : entry.args) rule.args.push_back({cast.arg.text, 0, cast.cast});
    return rule;
  }

  DiagnosticEngine& diags_;
};

class Resolver {
 public:
  Resolver(const model::SchemaSet& schemas, DiagnosticEngine& diags, const ResolveTarget& target)
      : schemas_(schemas), diags_(diags), target_(target) {
    result_.torch_version = target.torch_version;
  }

  std::optional<ResolvedPolicy> run(const std::vector<PolicyFile>& chain) {
    const size_t errors_before = diags_.error_count();
    // Bases first, so each file sees what it inherits.
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      apply_header(*it);
      apply_file(*it);
      file_index_++;
    }
    finish_header(chain.front());
    if (device_) check_fp8();
    check_rule_dtypes();
    merge_sections(chain);
    if (diags_.error_count() != errors_before) return std::nullopt;
    for (const PolicyFile& f : chain) result_.files.push_back(f.file);
    // An overload's entries stand together (Note [precision rules]), at its first one's place;
    // those scoped to modules first (Note [precision by place]), each group in resolution order.
    std::vector<bool> taken(slots_.size(), false);
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].removed || taken[i]) continue;
      const std::vector<size_t>& same_overload = index_.at(slots_[i].entry.schema);
      for (const bool scoped : {true, false})
        for (const size_t j : same_overload) {
          if (slots_[j].removed || taken[j] || slots_[j].entry.rule.modules.empty() == scoped) continue;
          taken[j] = true;
          result_.entries.push_back(std::move(slots_[j].entry));
        }
    }
    return std::move(result_);
  }

 private:
  struct Slot {
    ResolvedEntry entry;
    size_t file_index;            // position in the bases-first order
    const PolicyEntry* written;  // the entry as the file has it
    bool removed = false;
  };

  // A rule's dtypes must be the policy's lower-precision dtypes, known once every file is applied.
  void check_rule_dtypes() {
    for (const Slot& slot : slots_) {
      if (slot.removed || !slot.written->dtypes) continue;
      for (const Located& dtype : *slot.written->dtypes)
        if (std::find(result_.lower_precision.begin(), result_.lower_precision.end(), dtype.text) == result_.lower_precision.end())
          diags_.error(dtype.location,
                       fmt::format("'dtypes:' names {}, which is not a lower-precision dtype of this policy ('lower_precision: [{}]'), so "
                                   "the entry could never apply",
                                   dtype.text, fmt::join(result_.lower_precision, ", ")),
                       dtype.length);
    }
  }

  // Note [precision by place]: the requested file's sections first, then each base's that no
  // file before it gave the same pattern; dtypes checked against the policy's lower precision
  // (the device's default dtype when no file gives `lower_precision:`).
  void merge_sections(const std::vector<PolicyFile>& chain) {
    std::vector<WrittenSection> merged;
    std::set<std::string> given;
    for (const PolicyFile& file : chain)
      for (const WrittenSection& section : file.sections)
        if (given.insert(section.pattern.text).second) merged.push_back(section);
    if (merged.empty() || !device_) return;
    std::vector<std::string> dtypes = result_.lower_precision;
    if (!lower_precision_given_) {
      const auto& devices = autocast_devices();
      const auto info = std::find_if(devices.begin(), devices.end(), [&](const DeviceInfo& d) { return d.device == device_->text; });
      dtypes = {std::string(info->default_dtype)};
    }
    if (std::optional<std::vector<ModuleSection>> sections = resolve_sections(merged, dtypes, diags_, lower_precision_given_))
      result_.sections = std::move(*sections);
    // Note [fp8 by place]: an fp8 value decides where the fp8 list's GEMMs run in fp8; without a
    // list (or recipe) it could do nothing.
    const bool has_fp8_list = std::any_of(slots_.begin(), slots_.end(),
                                          [](const Slot& s) { return !s.removed && s.entry.policy == PolicyKind::fp8; });
    for (const ModuleSection& section : result_.sections)
      if (section.is_fp8() && (!has_fp8_list || !result_.fp8))
        diags_.error(section.location,
                     fmt::format("'{}: {}' has no effect: the policy has no fp8 list (or no 'autocast: fp8:' recipe); fp8 by place "
                                 "needs both (docs/fp8.md)",
                                 pattern_spelling(section.pattern), section.value()),
                     section.length);
  }

  void apply_header(const PolicyFile& file) {
    if (file.device) {
      device_ = *file.device;
      // A new device brings its own key unless the same file names one.
      dispatch_key_ = file.dispatch_key;
    } else if (file.dispatch_key) {
      dispatch_key_ = file.dispatch_key;
    }
    if (file.lower_precision) {
      lower_precision_given_ = true;
      result_.lower_precision.clear();
      for (const Located& dtype : *file.lower_precision) result_.lower_precision.push_back(dtype.text);
    }
    if (file.fp8) result_.fp8 = file.fp8;
  }

  // An fp8 list needs a recipe and a device with _scaled_mm (Note [fp8 recipe]); what it lists is
  // checked as each entry is added.
  void check_fp8() {
    const auto first = std::find_if(slots_.begin(), slots_.end(),
                                    [](const Slot& s) { return !s.removed && s.entry.policy == PolicyKind::fp8; });
    if (first == slots_.end()) return;
    const ResolvedEntry& entry = first->entry;
    if (!result_.fp8)
      diags_.error(entry.location,
                   "the fp8 list needs a recipe: add 'fp8: {scaling: current, granularity: tensorwise, forward: float8_e4m3fn, "
                   "backward: float8_e5m2}' under 'autocast:'",
                   entry.length);
    if (std::find(kFp8Devices.begin(), kFp8Devices.end(), result_.device) == kFp8Devices.end())
      diags_.error(entry.location,
                   fmt::format("fp8 runs on {} (devices whose PyTorch has _scaled_mm), not on '{}'", fmt::join(kFp8Devices, " and "),
                               result_.device),
                   entry.length);
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
    if (target_.dispatch_key) result_.dispatch_key = *target_.dispatch_key;
    if (result_.dispatch_key != info->dispatch_key) {
      const std::string message = fmt::format("dispatch key '{}' is not the autocast key of device '{}' ({})",
                                              result_.dispatch_key, device_->text, info->dispatch_key);
      if (target_.dispatch_key) diags_.warning({}, message + " (from --dispatch-key)");
      else diags_.warning(dispatch_key_->location, message, dispatch_key_->length);
    }
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
      const std::string qualified = pattern->ns.empty() ? pattern->name : pattern->ns + "::" + pattern->name;
      if (const std::optional<model::ReleaseSpan> span = history_span(*pattern, /*whole_op=*/true)) {
        diags_.error(op.location,
                     fmt::format("unknown op '{}' in PyTorch {}; it exists in {}: gate the entry with {}", qualified,
                                 target_.torch_version->str(), span->str(), gate_hint(*span)),
                     op.length);
        return {};
      }
      const std::string suggestion = closest_match(pattern->name, schemas_.operator_names(pattern->ns));
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
    const FunctionSchema* schema = schemas_.find(pattern->ns, pattern->unqualified());
    if (!schema) {
      if (const std::optional<model::ReleaseSpan> span = history_span(*pattern, /*whole_op=*/false)) {
        diags_.error(op.location,
                     fmt::format("'{}' is not an overload in PyTorch {}; it exists in {}: gate the entry with {}", op.text,
                                 target_.torch_version->str(), span->str(), gate_hint(*span)),
                     op.length);
        return {};
      }
      // Suggest what could be written here: eligible overloads, or all of them for `remove:`.
      std::vector<std::string> names;
      for (const FunctionSchema* s : overloads)
        if (for_remove || model::is_autocast_eligible(*s)) names.push_back(s->name().display());
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
    for (const RemoveEntry& item : file.remove) {
      const Located& op = item.op;
      if (file_index_ == 0) {
        diags_.error(op.location, "'remove:' drops inherited entries, but this policy extends nothing", op.length);
        continue;
      }
      if (gated_out(op, item.gate, std::nullopt)) continue;
      // Removing what this release lacks, or what was inherited only for other releases, is a no-op.
      if (const std::optional<std::string> reason = absent_by_release(op)) {
        skip(op, item.gate, std::nullopt, *reason);
        continue;
      }
      if (skipped_ops_.count(op.text)) {
        skip(op, item.gate, std::nullopt, "the inherited entry does not apply to this release");
        continue;
      }
      const std::vector<const FunctionSchema*> targets = expand(op, /*for_remove=*/true);
      size_t removed = 0;
      for (const FunctionSchema* schema : targets) {
        auto it = index_.find(schema);
        if (it == index_.end()) continue;
        bool any = false;
        for (const size_t i : it->second) {
          any = any || !slots_[i].removed;
          slots_[i].removed = true;
        }
        index_.erase(it);
        removed += any ? 1 : 0;
      }
      if (!targets.empty() && removed == 0)
        diags_.error(op.location, fmt::format("'{}' is in none of the inherited lists; nothing to remove", op.text), op.length);
    }
    for (const PolicyEntry& entry : file.entries) {
      if (gated_out(entry.op, entry.gate, entry.policy)) continue;
      for (const FunctionSchema* schema : expand(entry.op, /*for_remove=*/false)) add(file, entry, *schema);
    }
  }

  // Is this gated entry outside the target release? Records it as skipped when it is; reports a
  // gate without a target release, and a gate on an aten op that no supported release defines.
  bool gated_out(const Located& op, const ReleaseGate& gate, std::optional<PolicyKind> policy) {
    if (gate.empty()) return false;
    const Located& gate_text = gate.since_text ? *gate.since_text : *gate.until_text;
    if (!target_.torch_version) {
      diags_.error(gate_text.location,
                   fmt::format("'{}' is gated ({}), but the target PyTorch release is unknown; pass --torch-version", op.text,
                               gate.str()),
                   gate_text.length);
      return true;
    }
    const std::optional<OpPattern> pattern = parse_op_pattern(op.text);
    if (pattern->is_aten() && !target_.history->empty()) {
      const bool known = pattern->all_overloads || pattern->overload.empty()
                             ? target_.history->op(model::kDefaultNamespace, pattern->name).has_value()
                             : target_.history->overload(pattern->qualified()).has_value();
      if (!known) {
        diags_.error(op.location,
                     fmt::format("'{}' exists in no supported PyTorch release ({} and 2.0 to {}), so its gate can never apply",
                                 op.text, model::kOldestCodegenRelease.str(), model::kNewestRelease.str()),
                     op.length);
        return true;
      }
    }
    if (gate.admits(*target_.torch_version)) return false;
    skip(op, gate, policy, gate.str());
    skipped_ops_.insert(op.text);
    return true;
  }

  void skip(const Located& op, const ReleaseGate& gate, std::optional<PolicyKind> policy, std::string reason) {
    result_.skipped.push_back({op.text, policy, gate, std::move(reason), op.location});
  }

  // Where an aten op (or overload) missing from the target's schemas exists in other releases.
  std::optional<model::ReleaseSpan> history_span(const OpPattern& pattern, bool whole_op) const {
    if (!target_.torch_version || !pattern.is_aten() || target_.history->empty()) return std::nullopt;
    std::optional<model::ReleaseSpan> span = whole_op || pattern.all_overloads
                                                 ? target_.history->op(model::kDefaultNamespace, pattern.name)
                                                 : target_.history->overload(pattern.qualified());
    if (span && span->contains(*target_.torch_version)) return std::nullopt;  // not a matter of release
    return span;
  }

  // Why `remove:` of an op the target's schemas lack is no error: it is absent only in this release.
  std::optional<std::string> absent_by_release(const Located& op) const {
    const std::optional<OpPattern> pattern = parse_op_pattern(op.text);
    const bool missing = schemas_.overloads(pattern->ns, pattern->name).empty() ||
                         (!pattern->all_overloads &&
                          !schemas_.find(pattern->ns, pattern->unqualified()));
    if (!missing) return std::nullopt;
    const std::optional<model::ReleaseSpan> span = history_span(*pattern, schemas_.overloads(pattern->ns, pattern->name).empty());
    if (!span) return std::nullopt;
    return fmt::format("not in PyTorch {} (exists in {})", target_.torch_version->str(), span->str());
  }

  // An op that appears after the target release wants `since:`; one gone before it wants `until:`.
  std::string gate_hint(const model::ReleaseSpan& span) const {
    if (*target_.torch_version < span.first) return fmt::format("since: \"{}\"", span.first.str());
    const model::TorchVersion after = span.last == model::TorchVersion{1, 13} ? model::TorchVersion{2, 0}
                                                                               : model::TorchVersion{span.last.major(), static_cast<uint16_t>(span.last.minor() + 1)};
    return fmt::format("until: \"{}\"", after.str());
  }

  void add(const PolicyFile& file, const PolicyEntry& entry, const FunctionSchema& schema) {
    ResolvedEntry resolved;
    resolved.schema = &schema;
    resolved.op = schema.name().display();
    resolved.policy = entry.policy;
    resolved.message = entry.message ? entry.message->text : std::string();
    resolved.location = entry.op.location;
    resolved.length = entry.op.length;
    if (entry.modules)
      for (const Located& pattern : *entry.modules) resolved.module_locations.push_back(pattern.location);
    if (entry.policy == PolicyKind::fp32_set_opt_dtype) {
      const model::Argument* dtype = schema.find_argument("dtype");
      if (!dtype || !dtype->type.is_optional_scalar_type()) {
        diags_.error(entry.op.location,
                     fmt::format("fp32_set_opt_dtype needs an argument 'ScalarType? dtype', and '{}' has none", schema.name().display()),
                     entry.op.length);
        return;
      }
    }
    if (entry.policy == PolicyKind::fp8 &&
        (!schema.name().is_aten() || !schema.name().overload.empty() ||
         std::find(kFp8Ops.begin(), kFp8Ops.end(), schema.name().name) == kFp8Ops.end())) {
      diags_.error(entry.op.location,
                   fmt::format("fp8 has no implementation of '{}'; the fp8 list takes {}", schema.name().display(),
                               fmt::join(kFp8Ops, ", ")),
                   entry.op.length);
      return;
    }
    if (entry.policy == PolicyKind::fp32_append_dtype) {
      resolved.redispatch = find_redispatch(entry, schema);
      if (!resolved.redispatch) return;
      resolved.redispatch_op = resolved.redispatch->name().display();
    }
    std::optional<Rule> rule = resolve_rule(entry, &schema, diags_);
    if (!rule) return;
    resolved.rule = std::move(*rule);
    std::vector<size_t>& same_overload = index_[&schema];
    for (const size_t i : same_overload) {
      const Slot& existing = slots_[i];
      if (existing.removed) continue;
      if (!resolved.rule.conditional() && !existing.entry.rule.conditional()) {
        report_duplicate(existing, entry, resolved, schema);
        return;
      }
      if (rules_overlap(resolved.rule, existing.entry.rule)) {
        report_overlap(existing, entry, resolved, schema);
        return;
      }
    }
    same_overload.push_back(slots_.size());
    slots_.push_back({std::move(resolved), file_index_, &entry});
  }

  // Two entries of one overload that one call could match (Note [precision rules]).
  void report_overlap(const Slot& existing, const PolicyEntry& entry, const ResolvedEntry& resolved, const FunctionSchema& schema) {
    const auto describe = [](PolicyKind policy, const Rule& rule) {
      const std::string condition = rule.condition_str();
      return fmt::format("{}{}", spelling(policy), condition.empty() ? " (every call)" : " " + condition);
    };
    const std::string name = schema.name().display();
    if (existing.file_index == file_index_) {
      diags_.error(entry.op.location,
                   fmt::format("entries of '{}' overlap: a call could match both {} and {}; give them disjoint 'dtypes:' or "
                               "conditions",
                               name, describe(existing.entry.policy, existing.entry.rule), describe(resolved.policy, resolved.rule)),
                   entry.op.length);
      diags_.note(existing.entry.location, "the other entry is here", existing.entry.length);
    } else {
      diags_.error(entry.op.location,
                   fmt::format("'{}' is inherited as {}, and a call could match both that and this entry ({}); list it under "
                               "'remove:' or give the entries disjoint 'dtypes:' or conditions",
                               name, describe(existing.entry.policy, existing.entry.rule), describe(resolved.policy, resolved.rule)),
                   entry.op.length);
      diags_.note(existing.entry.location, "inherited from here", existing.entry.length);
    }
  }

  // The same overload listed twice: redundant in the same policy, a conflict in another one.
  void report_duplicate(const Slot& existing, const PolicyEntry& entry, const ResolvedEntry& resolved, const FunctionSchema& schema) {
    const std::string name = schema.name().display();
    const bool same_file = existing.file_index == file_index_;
    if (existing.entry.policy == entry.policy && existing.entry.rule != resolved.rule) {
      diags_.error(entry.op.location,
                   fmt::format("'{}' is listed twice in {} with different 'args:' ({} and {})", name, spelling(entry.policy),
                               existing.entry.rule.args_str().empty() ? "none" : existing.entry.rule.args_str(),
                               resolved.rule.args_str().empty() ? "none" : resolved.rule.args_str()),
                   entry.op.length);
      diags_.note(existing.entry.location, "listed here", existing.entry.length);
    } else if (existing.entry.policy == entry.policy) {
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
    const std::string name = schema.name().display();
    if (entry.redispatch) {
      const std::optional<OpPattern> pattern = parse_op_pattern(entry.redispatch->text);
      const FunctionSchema* target =
          pattern->all_overloads ? nullptr
                                 : schemas_.find(pattern->ns, pattern->unqualified());
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
      for (const FunctionSchema* c : candidates) names.push_back(c->name().display());
      diags_.error(entry.op.location,
                   fmt::format("fp32_append_dtype: several overloads could take the dtype for '{}' ({}); pick one with 'redispatch:'",
                               name, fmt::join(names, ", ")),
                   entry.op.length);
    }
    return nullptr;
  }

  const model::SchemaSet& schemas_;
  DiagnosticEngine& diags_;
  const ResolveTarget& target_;
  std::set<std::string> skipped_ops_;  // op texts of entries gated out, for `remove:` in derived files
  ResolvedPolicy result_;
  std::optional<Located> device_;
  std::optional<Located> dispatch_key_;
  std::vector<Slot> slots_;
  std::unordered_map<const FunctionSchema*, std::vector<size_t>> index_;  // an overload's slots
  size_t file_index_ = 0;
  bool lower_precision_given_ = false;  // by some file of the chain
};

}  // namespace

std::optional<Rule> resolve_rule(const PolicyEntry& entry, const model::FunctionSchema* schema, DiagnosticEngine& diags) {
  return RuleResolver(diags).resolve(entry, schema);
}

std::optional<std::vector<ModuleSection>> resolve_sections(const std::vector<WrittenSection>& written,
                                                          const std::vector<std::string>& lower_precision, DiagnosticEngine& diags,
                                                          bool lower_precision_given) {
  const size_t errors_before = diags.error_count();
  std::vector<ModuleSection> sections;
  for (const WrittenSection& w : written) {
    std::optional<ModuleSection> section = parse_section_value(w.value.text);
    if (!section) {  // the parser reports these; a caller that did not parse is a bug
      diags.error(w.value.location, fmt::format("unknown section value '{}'", w.value.text), w.value.length);
      continue;
    }
    if (section->kind == SectionKind::dtype &&
        std::find(lower_precision.begin(), lower_precision.end(), section->dtype) == lower_precision.end()) {
      diags.error(w.value.location,
                  fmt::format("'{}: {}' names a dtype that is not a lower-precision dtype of this policy ({}); write one of them, fp32 "
                              "or off",
                              w.pattern.text, w.value.text,
                              lower_precision_given ? fmt::format("'lower_precision: [{}]'", fmt::join(lower_precision, ", "))
                                                    : fmt::format("no 'lower_precision:' is given, so it is the device's default, {}",
                                                                  fmt::join(lower_precision, ", "))),
                  w.value.length);
      continue;
    }
    section->pattern = w.pattern.text;
    section->location = w.pattern.location;
    section->length = w.pattern.length;
    sections.push_back(std::move(*section));
  }
  if (diags.error_count() != errors_before) return std::nullopt;
  return sections;
}

std::optional<ResolvedPolicy> resolve_policy(const std::vector<PolicyFile>& chain, const model::SchemaSet& schemas,
                                             DiagnosticEngine& diags, const ResolveTarget& target) {
  if (chain.empty()) return std::nullopt;
  return Resolver(schemas, diags, target).run(chain);
}

std::optional<ResolvedPolicy> load_policy(const std::filesystem::path& path, const model::SchemaSet& schemas,
                                          SourceManager& sources, DiagnosticEngine& diags, const ResolveTarget& target) {
  std::optional<std::vector<PolicyFile>> chain = load_policy_chain(path, sources, diags);
  if (!chain) return std::nullopt;
  return resolve_policy(*chain, schemas, diags, target);
}

}  // namespace autocastgen::policy
