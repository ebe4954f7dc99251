// Shape checks of a policy file: keys, scalars, sequences, names; every problem is reported.
#include "policy/policy_file.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <span>

#include <fmt/format.h>

#include "support/strings.h"
#include "support/yaml.h"

namespace autocastgen::policy {

namespace {

constexpr std::string_view kTopKeys[] = {"autocast", "extends", "remove", "lists"};
constexpr std::string_view kHeaderKeys[] = {"device", "dispatch_key", "lower_precision"};
constexpr std::string_view kEntryKeys[] = {"op", "redispatch", "message", "since", "until"};
constexpr std::string_view kRemoveKeys[] = {"op", "since", "until"};
constexpr std::string_view kDtypes[] = {"float16", "bfloat16"};

bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

class FileParser {
 public:
  FileParser(uint32_t file, DiagnosticEngine& diags) : diags_(diags) { result_.file = file; }

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
    }
    if (diags_.error_count() != errors_before) return std::nullopt;
    return std::move(result_);
  }

 private:
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
        const std::string suggestion = closest_match(key.scalar(), {known.begin(), known.end()});
        std::string message = fmt::format("unknown {} '{}'", what, key.scalar());
        if (!suggestion.empty()) message += fmt::format("; did you mean '{}'?", suggestion);
        else message += fmt::format(" (expected one of: {})", fmt::join(known, ", "));
        diags_.error(key.location(), message, key.source_length());
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
                   exact ? static_cast<uint32_t>(node.scalar().size()) : node.source_length()};
  }

  // A banned op's message is raised as written and emitted into a C++ literal: printable text,
  // newlines and tabs. Reports the first other control character (an escape such as "\0" included).
  bool printable_message(const YamlNode& node) {
    const std::string& text = node.scalar();
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if ((c >= 0x20 && c != 0x7F) || c == '\n' || c == '\t') continue;
      const std::optional<SourceLocation> exact = node.exact_text_location();
      const SourceLocation where = exact ? SourceLocation{exact->file, exact->offset + static_cast<uint32_t>(i)} : node.location();
      diags_.error(where, fmt::format("'message:' holds {}; a message must be printable text (newlines and tabs allowed)",
                                      c == 0 ? std::string("a NUL byte") : fmt::format("control character U+{:04X}", c)),
                   exact ? 1 : node.source_length());
      return false;
    }
    return true;
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
      diags_.error(node.location(), fmt::format("'autocast:' must be a mapping with device, dispatch_key and lower_precision, found {}",
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
      }
    }
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
    if (op && !parse_op_pattern(op->text)) {
      diags_.error(op->location, fmt::format("malformed op name '{}'; expected name, name.overload or name.* (optionally ns::name)", op->text),
                   op->length);
      return std::nullopt;
    }
    return op;
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
    std::vector<std::string_view> policy_names;
    for (PolicyKind p : kAllPolicies) policy_names.push_back(spelling(p));
    for (const auto& [key, value, key_node] : checked_pairs(node, policy_names, "policy")) {
      const PolicyKind policy = *parse_policy_kind(key);
      const std::vector<YamlNode>* items = sequence(*value, fmt::format("the '{}' list", key));
      if (!items) continue;
      for (const YamlNode& item : *items) parse_entry(policy, item);
    }
  }

  void parse_entry(PolicyKind policy, const YamlNode& item) {
    PolicyEntry entry{policy, {}, std::nullopt, std::nullopt, {}};
    if (item.is_mapping()) {
      bool has_op = false;
      for (const auto& [key, value, key_node] : checked_pairs(item, kEntryKeys, "key in a list entry")) {
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
          if (policy != PolicyKind::banned) {
            diags_.error(key_node->location(), fmt::format("'message:' is only meaningful in banned, not in {}", spelling(policy)),
                       key_node->source_length());
            return;
          }
          entry.message = scalar(*value, "'message:' must be a non-empty string");
          if (!entry.message || !printable_message(*value)) return;
        } else if (key == "since" || key == "until") {
          if (!parse_gate_bound(key, *value, entry.gate)) return;
        }
      }
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
    if (policy == PolicyKind::banned && !entry.message) {
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

}  // namespace

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

std::optional<PolicyFile> parse_policy_file(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags) {
  std::optional<YamlNode> root = parse_yaml(sources, file, diags);
  if (!root) return std::nullopt;
  return FileParser(file, diags).run(*root);
}

}  // namespace autocastgen::policy
