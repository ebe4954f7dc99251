// Shape checks of a policy file: keys, scalars, sequences, names; every problem is reported.
#include "policy/policy_file.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <span>

#include <fmt/format.h>

#include "support/strings.h"
#include "support/yaml.h"

namespace autocastgen::policy {

namespace {

constexpr std::string_view kTopKeys[] = {"autocast", "extends", "remove", "lists", "modules"};
constexpr std::string_view kHeaderKeys[] = {"device", "dispatch_key", "lower_precision", "fp8"};
constexpr std::string_view kFp8Keys[] = {"scaling", "granularity", "forward", "backward", "amax_history_len", "margin", "select"};
constexpr std::string_view kEntryKeys[] = {"op", "redispatch", "message", "since", "until", "dtypes", "when", "unless", "args", "modules"};
constexpr std::string_view kRemoveKeys[] = {"op", "since", "until"};
constexpr std::string_view kDtypes[] = {"float16", "bfloat16"};
constexpr std::string_view kSectionValues[] = {"fp32", "off", "float16", "bfloat16"};

bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// `unknown <what> 'name'`, with a did-you-mean or the names it could have been.
std::string unknown_name(std::string_view name, std::span<const std::string_view> known, std::string_view what) {
  const std::string suggestion = closest_match(name, {known.begin(), known.end()});
  if (!suggestion.empty()) return fmt::format("unknown {} '{}'; did you mean '{}'?", what, name, suggestion);
  return fmt::format("unknown {} '{}' (expected one of: {})", what, name, fmt::join(known, ", "));
}

std::vector<std::string_view> policy_names() {
  std::vector<std::string_view> names;
  for (PolicyKind p : kAllPolicies) names.push_back(spelling(p));
  return names;
}

}  // namespace

class FileParser {
 public:
  FileParser(uint32_t file, DiagnosticEngine& diags) : diags_(diags) { result_.file = file; }

  // parse_policy_entry: the same checks as the file's fields, on values.
  std::optional<PolicyFile> run(const EntryValues& values) {
    const size_t errors_before = diags_.error_count();
    if (non_empty(values.device, "'device:' must be a device type name such as cuda or cpu")) {
      check_device(values.device);
      result_.device = values.device;
    }
    std::optional<PolicyKind> policy;
    if (non_empty(values.policy, "a policy name such as lower_precision_fp or fp32")) {
      const std::vector<std::string_view> names = policy_names();
      const std::optional<PolicyKind> parsed = parse_policy_kind(values.policy.text);
      if (!parsed) {
        diags_.error(values.policy.location, unknown_name(values.policy.text, names, "policy"), values.policy.length);
      } else if (*parsed == PolicyKind::fp8) {
        diags_.error(values.policy.location,
                     "an fp8 entry needs the policy's recipe ('autocast: fp8:'); load a policy file with an fp8 list instead",
                     values.policy.length);
      } else {
        policy = parsed;
      }
    }
    if (non_empty(values.op, "an op entry must be an op name such as mm, conv2d.padding or pow.*") && check_op_name(values.op) &&
        policy) {
      PolicyEntry entry{*policy, values.op, std::nullopt, std::nullopt, {}, std::nullopt, {}, {}, {}, std::nullopt};
      bool ok = true;
      if (values.message) {
        if (check_message_allowed(*policy, values.message->location, values.message->length) &&
            non_empty(*values.message, "'message:' must be a non-empty string") && printable_message(*values.message))
          entry.message = values.message;
      }
      if (values.rule) ok = parse_rule(*policy, *values.rule, entry);
      if (ok) add_entry(std::move(entry));
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return std::move(result_);
  }

  std::optional<PolicyFile> run(const YamlNode& root) {
    if (root.is_null()) {
      diags_.error(root.location(), "policy file is empty; expected a mapping with 'autocast:' and 'lists:'");
      return std::nullopt;
    }
    if (!root.is_mapping()) {
      diags_.error(root.location(), fmt::format("expected a mapping at the top of a policy file, found {}", root.describe()));
      return std::nullopt;
    }
    const size_t errors_before = diags_.error_count();
    for (const auto& [key, value, key_node] : checked_pairs(root, kTopKeys, "top-level key")) {
      if (key == "autocast") parse_header(*value);
      else if (key == "extends") result_.extends = scalar(*value, "'extends:' must be a file path");
      else if (key == "remove") parse_remove(*value);
      else if (key == "lists") parse_lists(*value);
      else if (key == "modules") parse_sections(*value);
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return std::move(result_);
  }

 private:
  friend class FieldReader;

  // The mapping's pairs whose keys are known; reports non-scalar, unknown and duplicate keys.
  struct KeyValue {
    std::string key;
    const YamlNode* value;
    const YamlNode* key_node;
  };
  std::vector<KeyValue> checked_pairs(const YamlNode& map,
                                                                     std::span<const std::string_view> known,
                                                                     std::string_view what) {
    std::vector<KeyValue> out;
    std::map<std::string, SourceLocation> seen;
    for (const auto& [key, value] : map.pairs()) {
      if (!key.is_scalar()) {
        diags_.error(key.location(), fmt::format("expected a {}, found {}", what, key.describe()));
        continue;
      }
      if (std::find(known.begin(), known.end(), key.scalar()) == known.end()) {
        diags_.error(key.location(), unknown_name(key.scalar(), known, what), key.source_length());
        continue;
      }
      if (auto [it, inserted] = seen.emplace(key.scalar(), key.location()); !inserted) {
        diags_.error(key.location(), fmt::format("duplicate key '{}'", key.scalar()), key.source_length());
        diags_.note(it->second, "first given here");
        continue;
      }
      out.push_back({key.scalar(), &value, &key});
    }
    return out;
  }

  std::optional<Located> scalar(const YamlNode& node, std::string_view what) {
    if (!node.is_scalar() || node.scalar().empty()) {
      diags_.error(node.location(), fmt::format("{}, found {}", what, node.is_scalar() ? "an empty string" : node.describe()));
      return std::nullopt;
    }
    const std::optional<SourceLocation> exact = node.exact_text_location();
    return Located{node.scalar(), exact.value_or(node.location()),
                   exact ? static_cast<uint32_t>(node.scalar().size()) : node.source_length(), exact.has_value()};
  }

  // A value given as a string (parse_policy_entry) is what a scalar node is in a file.
  bool non_empty(const Located& value, std::string_view what) {
    if (!value.text.empty()) return true;
    diags_.error(value.location, fmt::format("{}, found an empty string", what), value.length);
    return false;
  }

  // A banned op's message is raised as written and emitted into a C++ literal: printable text,
  // newlines and tabs. Reports the first other control character (an escape such as "\0" included).
  bool printable_message(const Located& message) {
    const std::string& text = message.text;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if ((c >= 0x20 && c != 0x7F) || c == '\n' || c == '\t') continue;
      const SourceLocation where = message.verbatim ? SourceLocation{message.location.file, message.location.offset + static_cast<uint32_t>(i)}
                                                    : message.location;
      diags_.error(where, fmt::format("'message:' holds {}; a message must be printable text (newlines and tabs allowed)",
                                      c == 0 ? std::string("a NUL byte") : fmt::format("control character U+{:04X}", c)),
                   message.verbatim ? 1 : message.length);
      return false;
    }
    return true;
  }

  bool check_message_allowed(PolicyKind policy, SourceLocation where, uint32_t length) {
    if (policy == PolicyKind::banned) return true;
    diags_.error(where, fmt::format("'message:' is only meaningful in banned, not in {}", spelling(policy)), length);
    return false;
  }

  // A sequence, or null (an empty list). Reports anything else.
  const std::vector<YamlNode>* sequence(const YamlNode& node, std::string_view what) {
    static const std::vector<YamlNode> kEmpty;
    if (node.is_null()) return &kEmpty;
    if (!node.is_sequence()) {
      diags_.error(node.location(), fmt::format("{} must be a sequence, found {}", what, node.describe()));
      return nullptr;
    }
    return &node.items();
  }

  void parse_header(const YamlNode& node) {
    if (!node.is_mapping()) {
      diags_.error(node.location(), fmt::format("'autocast:' must be a mapping with device, dispatch_key, lower_precision and fp8, found {}",
                                                node.describe()));
      return;
    }
    for (const auto& [key, value, key_node] : checked_pairs(node, kHeaderKeys, "key in 'autocast:'")) {
      if (key == "device") {
        result_.device = scalar(*value, "'device:' must be a device type name such as cuda or cpu");
        if (result_.device) check_device(*result_.device);
      } else if (key == "dispatch_key") {
        result_.dispatch_key = scalar(*value, "'dispatch_key:' must be an autocast dispatch key such as AutocastCUDA");
        if (result_.dispatch_key) check_dispatch_key(*result_.dispatch_key);
      } else if (key == "lower_precision") {
        parse_lower_precision(*value);
      } else if (key == "fp8") {
        parse_fp8(*value, key_node->location());
      }
    }
  }

  // Note [fp8 recipe]: every key optional (the defaults are PyTorch-and-torchao's usual recipe);
  // values the runtime does not implement are refused here, with what it does implement.
  void parse_fp8(const YamlNode& node, SourceLocation key_location) {
    if (!node.is_mapping()) {
      diags_.error(node.location(), fmt::format("'fp8:' must be a mapping such as {{scaling: current, granularity: tensorwise, "
                                                "forward: float8_e4m3fn, backward: float8_e5m2}}, found {}",
                                                node.describe()));
      return;
    }
    const size_t errors_before = diags_.error_count();
    Fp8Recipe recipe;
    recipe.location = key_location;
    const YamlNode* history_key = nullptr;
    std::optional<Located> granularity;  // where a row-wise granularity was given
    std::optional<Located> backward;
    for (const auto& [key, value, key_node] : checked_pairs(node, kFp8Keys, "key in 'fp8:'")) {
      if (key == "amax_history_len" || key == "margin") {
        const bool history = key == "amax_history_len";
        if (history) history_key = key_node;
        const std::optional<int64_t> number = bounded_integer(*value, key, history ? 1 : 0, history ? 65536 : 64);
        if (number) (history ? recipe.amax_history_len : recipe.margin) = *number;
        continue;
      }
      std::optional<Located> text = scalar(*value, fmt::format("'{}:' must be a name", key));
      if (!text) continue;
      if (key == "scaling") {
        check_choice(*text, {"current", "delayed"}, "fp8 scaling", "");
        recipe.scaling = text->text;
      } else if (key == "granularity") {
        check_choice(*text, {"tensorwise", "rowwise", "rowwise_with_gw_hp"}, "fp8 granularity",
                     " (docs/fp8.md, \"Row-wise scales\")");
        recipe.granularity = text->text;
        granularity = text;
      } else if (key == "select") {
        check_choice(*text, {"all", "auto", "measured"}, "fp8 select", "");
        recipe.select = text->text;
      } else if (key == "forward") {
        check_choice(*text, {"float8_e4m3fn"}, "fp8 forward dtype",
                     text->text == "float8_e5m2" ? " (an e5m2 forward would need an e5m2 x e5m2 GEMM in the backward, which "
                                                   "PyTorch's CUDA _scaled_mm does not have)"
                                                 : "");
        recipe.forward = text->text;
      } else {
        check_choice(*text, {"float8_e5m2", "float8_e4m3fn"}, "fp8 backward dtype", "");
        recipe.backward = text->text;
        backward = text;
      }
    }
    // Note [fp8 rowwise] (runtime/torch/fp8/rowwise.cpp): row-wise scales are current and e4m3 for
    // every operand; the backward defaults to float8_e4m3fn there.
    if (granularity && granularity->text.starts_with("rowwise")) {
      if (recipe.scaling == "delayed")
        diags_.error(granularity->location, fmt::format("'granularity: {}' takes 'scaling: current' only (delayed scaling with "
                                                        "row-wise scales is not implemented)", granularity->text),
                     granularity->length);
      if (!backward) {
        recipe.backward = "float8_e4m3fn";
      } else if (backward->text != "float8_e4m3fn") {
        diags_.error(backward->location, fmt::format("'granularity: {}' needs 'backward: float8_e4m3fn', found '{}' (row-wise "
                                                     "scales use e4m3 for every operand, as torchao's rowwise recipe does)",
                                                     granularity->text, backward->text),
                     backward->length);
      }
    }
    if (history_key && recipe.scaling != "delayed")
      diags_.error(history_key->location(), "'amax_history_len:' is only meaningful with 'scaling: delayed'", history_key->source_length());
    if (diags_.error_count() == errors_before) result_.fp8 = std::move(recipe);
  }

  void check_choice(const Located& value, const std::vector<std::string_view>& known, std::string_view what, std::string_view why) {
    if (std::find(known.begin(), known.end(), value.text) != known.end()) return;
    const std::string suggestion = closest_match(value.text, known);
    diags_.error(value.location,
                 suggestion.empty() || !why.empty()
                     ? fmt::format("unknown {} '{}' (expected {}){}", what, value.text, fmt::join(known, " or "), why)
                     : fmt::format("unknown {} '{}'; did you mean '{}'?", what, value.text, suggestion),
                 value.length);
  }

  std::optional<int64_t> bounded_integer(const YamlNode& node, std::string_view key, int64_t low, int64_t high) {
    std::optional<Located> text = scalar(node, fmt::format("'{}:' must be an integer", key));
    if (!text) return std::nullopt;
    int64_t value = 0;
    const char* begin = text->text.data();
    const char* end = begin + text->text.size();
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end || value < low || value > high) {
      diags_.error(text->location, fmt::format("'{}:' must be an integer from {} to {}, found '{}'", key, low, high, text->text),
                   text->length);
      return std::nullopt;
    }
    return value;
  }

  // Reports `value` unless it is one of `known`, with a did-you-mean or the list of choices.
  void check_known(const Located& value, const std::vector<std::string_view>& known, std::string_view what,
                   std::string_view choices_label) {
    if (std::find(known.begin(), known.end(), value.text) != known.end()) return;
    const std::string suggestion = closest_match(value.text, known);
    diags_.error(value.location,
                 suggestion.empty()
                     ? fmt::format("unknown {} '{}' ({}: {})", what, value.text, choices_label, fmt::join(known, ", "))
                     : fmt::format("unknown {} '{}'; did you mean '{}'?", what, value.text, suggestion),
                 value.length);
  }

  void check_device(const Located& device) {
    std::vector<std::string_view> names;
    for (const DeviceInfo& info : autocast_devices()) names.push_back(info.device);
    check_known(device, names, "device", "autocast devices");
  }

  void check_dispatch_key(const Located& key) {
    std::vector<std::string_view> keys;
    for (const DeviceInfo& info : autocast_devices()) keys.push_back(info.dispatch_key);
    check_known(key, keys, "autocast dispatch key", "expected one of");
  }

  void parse_lower_precision(const YamlNode& node) {
    const std::vector<YamlNode>* items = sequence(node, "'lower_precision:'");
    if (!items) return;
    if (items->empty()) {
      diags_.error(node.location(), "'lower_precision:' needs at least one dtype (float16 or bfloat16)");
      return;
    }
    std::vector<Located> dtypes;
    for (const YamlNode& item : *items) {
      std::optional<Located> dtype = scalar(item, "a lower-precision dtype must be float16 or bfloat16");
      if (!dtype) continue;
      if (std::find(std::begin(kDtypes), std::end(kDtypes), dtype->text) == std::end(kDtypes)) {
        // Common spellings from other tools, then typos.
        static const std::map<std::string, std::string, std::less<>> aliases = {
            {"half", "float16"}, {"fp16", "float16"}, {"bf16", "bfloat16"}, {"torch.float16", "float16"},
            {"torch.bfloat16", "bfloat16"}, {"torch.half", "float16"}};
        std::string suggestion;
        if (auto it = aliases.find(dtype->text); it != aliases.end()) suggestion = it->second;
        else suggestion = closest_match(dtype->text, {std::begin(kDtypes), std::end(kDtypes)});
        diags_.error(dtype->location,
                     suggestion.empty()
                         ? fmt::format("unknown lower-precision dtype '{}' (expected float16 or bfloat16)", dtype->text)
                         : fmt::format("unknown lower-precision dtype '{}'; did you mean '{}'?", dtype->text, suggestion),
                     dtype->length);
        continue;
      }
      for (const Located& earlier : dtypes)
        if (earlier.text == dtype->text) diags_.error(dtype->location, fmt::format("dtype '{}' is listed twice", dtype->text), dtype->length);
      dtypes.push_back(std::move(*dtype));
    }
    result_.lower_precision = std::move(dtypes);
  }

  std::optional<Located> op_name(const YamlNode& node) {
    std::optional<Located> op = scalar(node, "an op entry must be an op name such as mm, conv2d.padding or pow.*");
    if (op && !check_op_name(*op)) return std::nullopt;
    return op;
  }

  bool check_op_name(const Located& op) {
    if (parse_op_pattern(op.text)) return true;
    diags_.error(op.location, fmt::format("malformed op name '{}'; expected name, name.overload or name.* (optionally ns::name)", op.text),
                 op.length);
    return false;
  }

  void parse_remove(const YamlNode& node) {
    const std::vector<YamlNode>* items = sequence(node, "'remove:'");
    if (!items) return;
    for (const YamlNode& item : *items) {
      if (!item.is_mapping()) {
        if (std::optional<Located> op = op_name(item)) result_.remove.push_back({std::move(*op), {}});
        continue;
      }
      std::optional<Located> op;
      ReleaseGate gate;
      bool ok = true;
      for (const auto& [key, value, key_node] : checked_pairs(item, kRemoveKeys, "key in a 'remove:' entry")) {
        if (key == "op") {
          op = op_name(*value);
          ok = ok && op.has_value();
        } else {
          ok = parse_gate_bound(key, *value, gate) && ok;
        }
      }
      if (!op) {
        if (ok) diags_.error(item.location(), "'remove:' entry has no 'op:' key");
        continue;
      }
      if (ok && check_gate(gate)) result_.remove.push_back({std::move(*op), std::move(gate)});
    }
  }

  // `since:` / `until:`: a supported minor release such as "2.5" (Note [release gates]).
  bool parse_gate_bound(const std::string& key, const YamlNode& value, ReleaseGate& gate) {
    std::optional<Located> text = scalar(value, fmt::format("'{}:' must be a PyTorch release such as \"2.5\"", key));
    if (!text) return false;
    const std::optional<model::TorchVersion> version = model::TorchVersion::parse(text->text);
    if (!version) {
      diags_.error(text->location,
                   fmt::format("malformed PyTorch release '{}' in '{}:'; write MAJOR.MINOR, e.g. \"2.5\"", text->text, key),
                   text->length);
      return false;
    }
    if (version->patch()) {
      diags_.error(text->location,
                   fmt::format("'{}:' names a minor release; write \"{}\", not \"{}\"", key, version->release().str(), text->text),
                   text->length);
      return false;
    }
    if (!model::is_supported_release(*version)) {
      diags_.error(text->location,
                   fmt::format("PyTorch {} is not a release autocastgen supports ({} and {} to {})", text->text,
                               model::kOldestCodegenRelease.str(), model::TorchVersion(2, 0).str(), model::kNewestRelease.str()),
                   text->length);
      return false;
    }
    (key == "since" ? gate.since : gate.until) = version;
    (key == "since" ? gate.since_text : gate.until_text) = std::move(text);
    return true;
  }

  // A gate must admit at least one release.
  bool check_gate(const ReleaseGate& gate) {
    if (gate.since && gate.until && *gate.until <= *gate.since) {
      diags_.error(gate.until_text->location,
                   fmt::format("'until: {}' must be a later release than 'since: {}'; the entry would apply to no release",
                               gate.until_text->text, gate.since_text->text),
                   gate.until_text->length);
      diags_.note(gate.since_text->location, "'since:' given here", gate.since_text->length);
      return false;
    }
    return true;
  }

  void parse_lists(const YamlNode& node) {
    if (node.is_null()) return;
    if (!node.is_mapping()) {
      diags_.error(node.location(), fmt::format("'lists:' must map policy names to op lists, found {}", node.describe()));
      return;
    }
    const std::vector<std::string_view> names = policy_names();
    for (const auto& [key, value, key_node] : checked_pairs(node, names, "policy")) {
      const PolicyKind policy = *parse_policy_kind(key);
      const std::vector<YamlNode>* items = sequence(*value, fmt::format("the '{}' list", key));
      if (!items) continue;
      for (const YamlNode& item : *items) parse_entry(policy, item);
    }
  }

  // `ignored`: keys other documents put beside an entry's own (FieldReader).
  void parse_entry(PolicyKind policy, const YamlNode& item, std::span<const std::string_view> ignored = {}) {
    PolicyEntry entry{policy, {}, std::nullopt, std::nullopt, {}, std::nullopt, {}, {}, {}, std::nullopt};
    if (item.is_mapping()) {
      bool has_op = false;
      std::vector<std::string_view> known(std::begin(kEntryKeys), std::end(kEntryKeys));
      known.insert(known.end(), ignored.begin(), ignored.end());
      for (const auto& [key, value, key_node] : checked_pairs(item, known, "key in a list entry")) {
        if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) continue;
        if (key == "op") {
          std::optional<Located> op = op_name(*value);
          if (!op) return;
          entry.op = std::move(*op);
          has_op = true;
        } else if (key == "redispatch") {
          if (policy != PolicyKind::fp32_append_dtype) {
            diags_.error(key_node->location(), fmt::format("'redispatch:' is only meaningful in fp32_append_dtype, not in {}", spelling(policy)),
                       key_node->source_length());
            return;
          }
          entry.redispatch = op_name(*value);
          if (!entry.redispatch) return;
        } else if (key == "message") {
          if (!check_message_allowed(policy, key_node->location(), key_node->source_length())) return;
          entry.message = scalar(*value, "'message:' must be a non-empty string");
          if (!entry.message || !printable_message(*entry.message)) return;
        } else if (key == "since" || key == "until") {
          if (!parse_gate_bound(key, *value, entry.gate)) return;
        } else if (key == "dtypes") {
          entry.dtypes = rule_dtypes(*value);
          if (!entry.dtypes) return;
        } else if (key == "when" || key == "unless") {
          std::optional<std::vector<WrittenCondition>> conditions = rule_conditions(key, *value);
          if (!conditions) return;
          (key == "when" ? entry.when : entry.unless) = std::move(*conditions);
        } else if (key == "args") {
          if (!check_args_allowed(policy, *key_node)) return;
          std::optional<std::vector<WrittenArgCast>> args = rule_args(*value);
          if (!args) return;
          entry.args = std::move(*args);
        } else if (key == "modules") {
          entry.modules = rule_modules(*value);
          if (!entry.modules) return;
        }
      }
      if (!check_when_unless(entry)) return;
      if (!has_op) {
        diags_.error(item.location(), "list entry has no 'op:' key");
        return;
      }
    } else {
      std::optional<Located> op = op_name(item);
      if (!op) return;
      entry.op = std::move(*op);
    }
    if (!check_gate(entry.gate)) return;
    add_entry(std::move(entry));
  }

  // A rule given apart from its entry (EntryValues::rule): a mapping of the rule keys only.
  bool parse_rule(PolicyKind policy, const YamlNode& node, PolicyEntry& entry) {
    static constexpr std::string_view kRuleKeys[] = {"dtypes", "when", "unless", "args", "modules"};
    if (node.is_null()) return true;
    if (!node.is_mapping()) {
      diags_.error(node.location(), fmt::format("a rule must be a mapping with dtypes, when, unless, args and modules, found {}", node.describe()));
      return false;
    }
    const size_t errors_before = diags_.error_count();
    for (const auto& [key, value, key_node] : checked_pairs(node, kRuleKeys, "key in a rule")) {
      if (key == "dtypes") {
        entry.dtypes = rule_dtypes(*value);
      } else if (key == "when" || key == "unless") {
        if (std::optional<std::vector<WrittenCondition>> conditions = rule_conditions(key, *value))
          (key == "when" ? entry.when : entry.unless) = std::move(*conditions);
      } else if (key == "modules") {
        entry.modules = rule_modules(*value);
      } else if (check_args_allowed(policy, *key_node)) {
        if (std::optional<std::vector<WrittenArgCast>> args = rule_args(*value)) entry.args = std::move(*args);
      }
    }
    return diags_.error_count() == errors_before && check_when_unless(entry);
  }

  // ---- Note [precision rules]: the shape of `dtypes:`, `when:`, `unless:` and `args:`; what the
  // names and values mean for the op is checked against its schema when the policy is resolved.

  // `dtypes: [float16]` (or one name): lower-precision dtypes, each once.
  std::optional<std::vector<Located>> rule_dtypes(const YamlNode& node) {
    std::vector<YamlNode> single;
    const std::vector<YamlNode>* items = &single;
    if (node.is_scalar()) single.push_back(node);
    else if (!(items = sequence(node, "'dtypes:'"))) return std::nullopt;
    if (items->empty()) {
      diags_.error(node.location(), "'dtypes:' needs at least one dtype (float16 or bfloat16); leave the key out to apply to every dtype");
      return std::nullopt;
    }
    std::vector<Located> dtypes;
    for (const YamlNode& item : *items) {
      std::optional<Located> dtype = scalar(item, "a dtype in 'dtypes:' must be float16 or bfloat16");
      if (!dtype) return std::nullopt;
      if (std::find(std::begin(kDtypes), std::end(kDtypes), dtype->text) == std::end(kDtypes)) {
        check_choice(*dtype, {std::begin(kDtypes), std::end(kDtypes)}, "lower-precision dtype", "");
        return std::nullopt;
      }
      for (const Located& earlier : dtypes)
        if (earlier.text == dtype->text) {
          diags_.error(dtype->location, fmt::format("dtype '{}' is listed twice in 'dtypes:'", dtype->text), dtype->length);
          return std::nullopt;
        }
      dtypes.push_back(std::move(*dtype));
    }
    return dtypes;
  }

  // ---- Note [precision by place]: module patterns, an entry's `modules:` and the `modules:` section.

  // A glob over module paths: a non-empty string without whitespace or control characters.
  std::optional<Located> module_pattern(const YamlNode& node, std::string_view what) {
    if (!node.is_scalar()) {
      diags_.error(node.location(), fmt::format("{} must be a module pattern such as lm_head or layers.*.attn, found {}", what, node.describe()));
      return std::nullopt;
    }
    const std::optional<SourceLocation> exact = node.exact_text_location();
    Located pattern{node.scalar(), exact.value_or(node.location()),
                    exact ? static_cast<uint32_t>(std::max<size_t>(node.scalar().size(), 1)) : node.source_length(), exact.has_value()};
    if (pattern.text.empty()) {
      diags_.error(pattern.location,
                   "an empty module pattern matches no module; write a path as named_modules() spells it, such as lm_head or layers.*.attn",
                   node.source_length());
      return std::nullopt;
    }
    for (size_t i = 0; i < pattern.text.size(); ++i) {
      const auto c = static_cast<unsigned char>(pattern.text[i]);
      if (c > 0x20 && c != 0x7F) continue;
      const SourceLocation where = pattern.verbatim ? SourceLocation{pattern.location.file, pattern.location.offset + static_cast<uint32_t>(i)}
                                                    : pattern.location;
      diags_.error(where,
                   fmt::format("module pattern {} holds {}; module paths have no whitespace or control characters", yaml_quoted(pattern.text),
                               c == ' ' ? std::string("a space") : fmt::format("character U+{:04X}", c)),
                   pattern.verbatim ? 1 : pattern.length);
      return std::nullopt;
    }
    return pattern;
  }

  // An entry's `modules: [pattern, ...]`: one pattern or more, each once.
  std::optional<std::vector<Located>> rule_modules(const YamlNode& node) {
    if (!node.is_null() && !node.is_sequence()) {
      diags_.error(node.location(),
                   fmt::format("'modules:' must be a list of module patterns such as [\"layers.*.attn\"], found {}", node.describe()));
      return std::nullopt;
    }
    if (node.is_null() || node.items().empty()) {
      diags_.error(node.location(), "'modules:' needs at least one module pattern; leave the key out to apply everywhere");
      return std::nullopt;
    }
    std::vector<Located> patterns;
    for (const YamlNode& item : node.items()) {
      std::optional<Located> pattern = module_pattern(item, "an item of 'modules:'");
      if (!pattern) return std::nullopt;
      for (const Located& earlier : patterns)
        if (earlier.text == pattern->text) {
          diags_.error(pattern->location, fmt::format("module pattern '{}' is listed twice in 'modules:'", pattern->text), pattern->length);
          return std::nullopt;
        }
      patterns.push_back(std::move(*pattern));
    }
    return patterns;
  }

  // The `modules:` section: patterns, each once, mapped to fp32, off or a lower-precision dtype
  // (which must be the policy's: the resolver checks, once every file's header is applied).
  void parse_sections(const YamlNode& node) {
    if (node.is_null()) return;
    if (!node.is_mapping()) {
      diags_.error(node.location(), fmt::format("'modules:' must map module patterns to fp32, off, a lower-precision dtype or {{fp8: on|off}}, such as "
                                                "{{lm_head: fp32}}, found {}",
                                                node.describe()));
      return;
    }
    std::map<std::string, SourceLocation> seen;
    for (const auto& [key, value] : node.pairs()) {
      std::optional<Located> pattern = module_pattern(key, "a key of 'modules:'");
      if (!pattern) continue;
      if (auto [it, inserted] = seen.emplace(pattern->text, pattern->location); !inserted) {
        diags_.error(pattern->location, fmt::format("module pattern '{}' is given twice in 'modules:'", pattern->text), pattern->length);
        diags_.note(it->second, "first given here");
        continue;
      }
      if (value.is_mapping()) {  // Note [fp8 by place]: `{fp8: on}` or `{fp8: off}`
        if (std::optional<Located> fp8 = section_fp8(value, *pattern)) result_.sections.push_back({std::move(*pattern), std::move(*fp8)});
        continue;
      }
      std::optional<Located> text = scalar(value, "a value in 'modules:' must be fp32, off, a lower-precision dtype or {fp8: on|off}");
      if (!text) continue;
      if (!parse_section_value(text->text)) {
        static const std::map<std::string, std::string, std::less<>> aliases = {
            {"half", "float16"}, {"fp16", "float16"}, {"bf16", "bfloat16"}, {"float32", "fp32"}, {"float", "fp32"},
            {"torch.float32", "fp32"}, {"torch.float16", "float16"}, {"torch.bfloat16", "bfloat16"}, {"false", "off"},
            {"none", "off"}, {"disabled", "off"}, {"fp8_off", "{fp8: off}"}, {"no_fp8", "{fp8: off}"}, {"fp8", "{fp8: on}"},
            {"fp8_on", "{fp8: on}"}};
        const auto alias = aliases.find(text->text);
        const std::string suggestion =
            alias != aliases.end() ? alias->second : closest_match(text->text, {std::begin(kSectionValues), std::end(kSectionValues)});
        diags_.error(text->location,
                     suggestion.empty()
                         ? fmt::format("unknown section value '{}' for '{}' (expected fp32, off, float16, bfloat16 or {{fp8: on|off}})", text->text, pattern->text)
                         : fmt::format("unknown section value '{}' for '{}'; did you mean '{}'?", text->text, pattern->text, suggestion),
                     text->length);
        continue;
      }
      result_.sections.push_back({std::move(*pattern), std::move(*text)});
    }
  }

  // Note [fp8 by place]: a section value `{fp8: on}` or `{fp8: off}`, returned as that canonical
  // text (what parse_section_value reads) at the place of the on/off.
  std::optional<Located> section_fp8(const YamlNode& node, const Located& pattern) {
    static constexpr std::string_view kSectionMapKeys[] = {"fp8"};
    std::optional<Located> out;
    const size_t errors_before = diags_.error_count();
    for (const auto& [key, value, key_node] : checked_pairs(node, kSectionMapKeys, "key in a 'modules:' value")) {
      std::optional<Located> text = scalar(*value, fmt::format("'fp8:' for '{}' must be on or off", pattern.text));
      if (!text) return std::nullopt;
      if (text->text != "on" && text->text != "off") {
        static const std::map<std::string, std::string, std::less<>> aliases = {
            {"true", "on"}, {"True", "on"}, {"yes", "on"}, {"enabled", "on"}, {"false", "off"}, {"False", "off"},
            {"no", "off"}, {"disabled", "off"}, {"none", "off"}};
        const auto alias = aliases.find(text->text);
        diags_.error(text->location,
                     alias != aliases.end()
                         ? fmt::format("unknown fp8 value '{}' for '{}'; did you mean '{}'?", text->text, pattern.text, alias->second)
                         : fmt::format("unknown fp8 value '{}' for '{}' (expected on or off)", text->text, pattern.text),
                     text->length);
        return std::nullopt;
      }
      out = Located{fmt::format("{{fp8: {}}}", text->text), text->location, text->length, false};
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    if (!out) diags_.error(node.location(), fmt::format("the value for '{}' is an empty mapping; write {{fp8: on}} or {{fp8: off}}", pattern.text));
    return out;
  }

  // `when: {arg: value-or-list}` / `unless: {...}`: argument names, each with one or more scalars
  // or nulls.
  std::optional<std::vector<WrittenCondition>> rule_conditions(const std::string& key, const YamlNode& node) {
    if (!node.is_mapping() || node.pairs().empty()) {
      diags_.error(node.location(),
                   fmt::format("'{}:' must map argument names to values, such as {{reduction: none}} or {{exponent: [1, 2]}}, found {}",
                               key, node.is_mapping() ? "an empty mapping" : node.describe()));
      return std::nullopt;
    }
    std::vector<WrittenCondition> out;
    for (const auto& [name, value, name_node] : rule_pairs(node, fmt::format("argument name in '{}:'", key))) {
      WrittenCondition condition{*name, {}, {}};
      std::vector<YamlNode> single;
      const std::vector<YamlNode>* items = &single;
      if (value->is_sequence()) items = &value->items();
      else single.push_back(*value);
      if (items->empty()) {
        diags_.error(value->location(), fmt::format("'{}' in '{}:' needs at least one value", name->text, key));
        return std::nullopt;
      }
      for (const YamlNode& item : *items) {
        if (item.is_null()) {
          if (!condition.null_location.valid()) condition.null_location = item.location();
          condition.values.emplace_back(std::nullopt);
          continue;
        }
        if (!item.is_scalar()) {
          diags_.error(item.location(), fmt::format("a value in '{}:' must be a scalar or null, found {}", key, item.describe()));
          return std::nullopt;
        }
        const std::optional<SourceLocation> exact = item.exact_text_location();
        condition.values.push_back(Located{item.scalar(), exact.value_or(item.location()),
                                           exact ? static_cast<uint32_t>(std::max<size_t>(item.scalar().size(), 1)) : item.source_length(),
                                           exact.has_value()});
      }
      out.push_back(std::move(condition));
    }
    if (out.size() != node.pairs().size()) return std::nullopt;
    return out;
  }

  // `args: {name: lower_precision | fp32 | keep}`.
  std::optional<std::vector<WrittenArgCast>> rule_args(const YamlNode& node) {
    if (!node.is_mapping() || node.pairs().empty()) {
      diags_.error(node.location(),
                   fmt::format("'args:' must map Tensor argument names to lower_precision, fp32 or keep, such as {{weight: fp32}}, found {}",
                               node.is_mapping() ? "an empty mapping" : node.describe()));
      return std::nullopt;
    }
    std::vector<WrittenArgCast> out;
    for (const auto& [name, value, name_node] : rule_pairs(node, "argument name in 'args:'")) {
      std::optional<Located> cast = scalar(*value, "a cast in 'args:' must be lower_precision, fp32 or keep");
      if (!cast) return std::nullopt;
      const std::optional<ArgCast> parsed = parse_arg_cast(cast->text);
      if (!parsed) {
        check_choice(*cast, {"lower_precision", "fp32", "keep"}, "argument cast", "");
        return std::nullopt;
      }
      out.push_back({*name, *parsed, std::move(*cast)});
    }
    if (out.size() != node.pairs().size()) return std::nullopt;
    return out;
  }

  // The pairs of a rule mapping whose keys are argument names (identifiers, each once).
  struct NamedValue {
    std::optional<Located> name;
    const YamlNode* value;
    const YamlNode* name_node;
  };
  std::vector<NamedValue> rule_pairs(const YamlNode& map, const std::string& what) {
    std::vector<NamedValue> out;
    std::map<std::string, SourceLocation> seen;
    for (const auto& [key, value] : map.pairs()) {
      std::optional<Located> name = scalar(key, fmt::format("expected an {}", what));
      if (!name) continue;
      if (!is_ident(name->text)) {
        diags_.error(name->location, fmt::format("'{}' is not an argument name", name->text), name->length);
        continue;
      }
      if (auto [it, inserted] = seen.emplace(name->text, name->location); !inserted) {
        diags_.error(name->location, fmt::format("argument '{}' is named twice", name->text), name->length);
        diags_.note(it->second, "first named here");
        continue;
      }
      out.push_back({std::move(name), &value, &key});
    }
    return out;
  }

  bool check_args_allowed(PolicyKind policy, const YamlNode& key_node) {
    if (policy == PolicyKind::lower_precision_fp || policy == PolicyKind::fp32 || policy == PolicyKind::promote) return true;
    diags_.error(key_node.location(),
                 fmt::format("'args:' is only meaningful in lower_precision_fp, fp32 and promote (the lists that cast), not in {}",
                             spelling(policy)),
                 key_node.source_length());
    return false;
  }

  // One argument in both `when:` and `unless:` would read as a contradiction or a set difference;
  // either way, say it with one of them.
  bool check_when_unless(const PolicyEntry& entry) {
    for (const WrittenCondition& u : entry.unless)
      for (const WrittenCondition& w : entry.when)
        if (u.arg.text == w.arg.text) {
          diags_.error(u.arg.location,
                       fmt::format("argument '{}' is in both 'when:' and 'unless:'; list only the values it may take under 'when:'", u.arg.text),
                       u.arg.length);
          diags_.note(w.arg.location, "named in 'when:' here", w.arg.length);
          return false;
        }
    return true;
  }

  void add_entry(PolicyEntry entry) {
    if (entry.policy == PolicyKind::banned && !entry.message) {
      diags_.error(entry.op.location,
                   fmt::format("banned op '{}' needs a message for its users: write {{op: {}, message: \"...\"}}", entry.op.text, entry.op.text),
                   entry.op.length);
      return;
    }
    result_.entries.push_back(std::move(entry));
  }

  DiagnosticEngine& diags_;
  PolicyFile result_;
};

std::optional<OpPattern> parse_op_pattern(std::string_view text) {
  OpPattern pattern;
  if (const size_t colons = text.find("::"); colons != std::string_view::npos) {
    pattern.ns = std::string(text.substr(0, colons));
    if (!is_ident(pattern.ns)) return std::nullopt;
    text.remove_prefix(colons + 2);
  }
  const size_t dot = text.find('.');
  pattern.name = std::string(text.substr(0, dot));
  if (!is_ident(pattern.name)) return std::nullopt;
  if (dot != std::string_view::npos) {
    const std::string_view overload = text.substr(dot + 1);
    if (overload == "*") {
      pattern.all_overloads = true;
    } else {
      if (overload.empty() || overload.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string_view::npos)
        return std::nullopt;
      pattern.overload = std::string(overload);
    }
  }
  return pattern;
}

FieldReader::FieldReader(DiagnosticEngine& diags) : parser_(std::make_unique<FileParser>(0, diags)) {}
FieldReader::~FieldReader() = default;

std::optional<Located> FieldReader::device(const YamlNode& node) {
  std::optional<Located> device = parser_->scalar(node, "'device:' must be a device type name such as cuda or cpu");
  if (!device) return std::nullopt;
  const size_t errors = parser_->diags_.error_count();
  parser_->check_device(*device);
  return parser_->diags_.error_count() == errors ? device : std::nullopt;
}

std::optional<Located> FieldReader::dispatch_key(const YamlNode& node) {
  std::optional<Located> key = parser_->scalar(node, "'dispatch_key:' must be an autocast dispatch key such as AutocastCUDA");
  if (!key) return std::nullopt;
  const size_t errors = parser_->diags_.error_count();
  parser_->check_dispatch_key(*key);
  return parser_->diags_.error_count() == errors ? key : std::nullopt;
}

std::optional<std::vector<Located>> FieldReader::lower_precision(const YamlNode& node) {
  const size_t errors = parser_->diags_.error_count();
  parser_->parse_lower_precision(node);
  if (parser_->diags_.error_count() != errors) return std::nullopt;
  return std::move(parser_->result_.lower_precision);
}

std::optional<Fp8Recipe> FieldReader::fp8(const YamlNode& node) {
  const size_t errors = parser_->diags_.error_count();
  parser_->parse_fp8(node, node.location());
  if (parser_->diags_.error_count() != errors) return std::nullopt;
  return std::move(parser_->result_.fp8);
}

std::optional<std::vector<WrittenSection>> FieldReader::sections(const YamlNode& node) {
  const size_t errors = parser_->diags_.error_count();
  parser_->parse_sections(node);
  std::vector<WrittenSection> sections = std::move(parser_->result_.sections);
  parser_->result_.sections.clear();
  if (parser_->diags_.error_count() != errors) return std::nullopt;
  return sections;
}

std::optional<PolicyKind> FieldReader::policy(const YamlNode& node) {
  const std::optional<Located> name = parser_->scalar(node, "a policy name such as lower_precision_fp or fp32");
  if (!name) return std::nullopt;
  const std::optional<PolicyKind> policy = parse_policy_kind(name->text);
  if (!policy) parser_->diags_.error(name->location, unknown_name(name->text, policy_names(), "policy"), name->length);
  return policy;
}

std::optional<PolicyEntry> FieldReader::entry(PolicyKind policy, const YamlNode& item, std::span<const std::string_view> ignored) {
  std::vector<PolicyEntry>& entries = parser_->result_.entries;
  const size_t before = entries.size();
  parser_->parse_entry(policy, item, ignored);
  if (entries.size() == before) return std::nullopt;
  PolicyEntry entry = std::move(entries.back());
  entries.pop_back();
  return entry;
}

std::optional<PolicyFile> parse_policy_entry(uint32_t file, const EntryValues& values, DiagnosticEngine& diags) {
  return FileParser(file, diags).run(values);
}

std::optional<PolicyFile> parse_policy_file(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags) {
  std::optional<YamlNode> root = parse_yaml(sources, file, diags);
  if (!root) return std::nullopt;
  return FileParser(file, diags).run(*root);
}

}  // namespace autocastgen::policy
