// Policy names, the device table and counting helpers.
#include "policy/policy.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "support/strings.h"

namespace autocastgen::policy {

std::string_view spelling(PolicyKind policy) {
  switch (policy) {
    case PolicyKind::lower_precision_fp: return "lower_precision_fp";
    case PolicyKind::fp32: return "fp32";
    case PolicyKind::fp32_set_opt_dtype: return "fp32_set_opt_dtype";
    case PolicyKind::fp32_append_dtype: return "fp32_append_dtype";
    case PolicyKind::promote: return "promote";
    case PolicyKind::banned: return "banned";
    case PolicyKind::fp8: return "fp8";
  }
  return "fp32";
}

std::optional<PolicyKind> parse_policy_kind(std::string_view text) {
  for (PolicyKind policy : kAllPolicies)
    if (spelling(policy) == text) return policy;
  return std::nullopt;
}

std::string ReleaseGate::str() const {
  std::string out;
  if (since) out = "since " + since->str();
  if (until) out += (out.empty() ? "until " : ", until ") + until->str();
  return out;
}

std::string_view spelling(PolicySource source) {
  switch (source) {
    case PolicySource::policy_file: return "policy";
    case PolicySource::manifest: return "manifest";
    case PolicySource::cpp: return "C++";
  }
  return "policy";
}

size_t ResolvedPolicy::count(PolicyKind policy) const {
  return static_cast<size_t>(
      std::count_if(entries.begin(), entries.end(), [&](const ResolvedEntry& e) { return e.policy == policy; }));
}

std::string ResolvedPolicy::behaviour_str() const {
  std::string text = fmt::format("{} {} [{}]", device, dispatch_key, fmt::join(lower_precision, ","));
  if (fp8) text += " fp8 " + fp8->str();
  text += " sections " + sections_str(sections);
  // By overload: the order of different overloads says nothing, that of one overload's entries
  // (its rules, the first that matches wins) does.
  std::vector<const ResolvedEntry*> ordered;
  for (const ResolvedEntry& entry : entries) ordered.push_back(&entry);
  std::stable_sort(ordered.begin(), ordered.end(), [](const ResolvedEntry* a, const ResolvedEntry* b) { return a->op < b->op; });
  for (const ResolvedEntry* entry : ordered)
    text += fmt::format("\n{} {} {} {} {}", entry->op, spelling(entry->policy), entry->redispatch_op, entry->rule.str(), entry->message);
  return text;
}

size_t ResolvedPolicy::overload_count() const {
  size_t count = 0;
  for (size_t i = 0; i < entries.size(); ++i)
    if (i == 0 || entries[i].op != entries[i - 1].op) ++count;  // an overload's entries are adjacent
  return count;
}

std::vector<PolicyKind> ResolvedPolicy::reported_kinds() const {
  std::vector<PolicyKind> kinds;
  for (PolicyKind kind : kAllPolicies)
    if (kind != PolicyKind::fp8 || fp8 || count(PolicyKind::fp8) != 0) kinds.push_back(kind);
  return kinds;
}

std::string Fp8Recipe::str() const {
  std::string out = fmt::format("{{scaling: {}, granularity: {}, forward: {}, backward: {}", scaling, granularity, forward, backward);
  if (scaling == "delayed") out += fmt::format(", amax_history_len: {}", amax_history_len);
  out += fmt::format(", margin: {}", margin);
  if (select != "all") out += fmt::format(", select: {}", select);
  return out + "}";
}

const ResolvedEntry* ResolvedPolicy::find(std::string_view op) const {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const ResolvedEntry& e) { return e.op == op; });
  return it == entries.end() ? nullptr : &*it;
}

std::span<const DtypeName> dtype_names() {
  static constexpr DtypeName kNames[] = {
      {"uint8", "Byte", 0},   {"int8", "Char", 1},       {"int16", "Short", 2},     {"int32", "Int", 3},
      {"int64", "Long", 4},   {"float16", "Half", 5},    {"float32", "Float", 6},   {"float64", "Double", 7},
      {"complex64", "ComplexFloat", 9}, {"complex128", "ComplexDouble", 10}, {"bool", "Bool", 11},
      {"bfloat16", "BFloat16", 15}};
  return kNames;
}

std::string_view spelling(ArgCast cast) {
  switch (cast) {
    case ArgCast::lower_precision: return "lower_precision";
    case ArgCast::fp32: return "fp32";
    case ArgCast::keep: return "keep";
  }
  return "keep";
}

std::optional<ArgCast> parse_arg_cast(std::string_view text) {
  for (ArgCast cast : kAllArgCasts)
    if (spelling(cast) == text) return cast;
  return std::nullopt;
}

bool operator==(const RuleValue& a, const RuleValue& b) {
  using Kind = RuleValue::Kind;
  const auto number = [](const RuleValue& v) { return v.kind == Kind::integer || v.kind == Kind::real; };
  if (number(a) && number(b)) {
    if (a.kind == Kind::integer && b.kind == Kind::integer) return a.integer == b.integer;
    const double x = a.kind == Kind::integer ? static_cast<double>(a.integer) : a.real;
    const double y = b.kind == Kind::integer ? static_cast<double>(b.integer) : b.real;
    return x == y || (std::isnan(x) && std::isnan(y));
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::none: return true;
    case Kind::boolean: return a.boolean == b.boolean;
    default: return a.text == b.text;
  }
}

namespace {

std::string values_str(const std::vector<RuleValue>& values) {
  std::vector<std::string> spelled;
  for (const RuleValue& v : values) spelled.push_back(v.spelling);
  return values.size() == 1 ? spelled.front() : fmt::format("[{}]", fmt::join(spelled, ", "));
}

std::string conditions_str(const std::vector<ArgCondition>& conditions) {
  std::vector<std::string> items;
  for (const ArgCondition& c : conditions) items.push_back(fmt::format("{}: {}", c.arg, values_str(c.values)));
  return fmt::format("{{{}}}", fmt::join(items, ", "));
}

std::vector<std::string> condition_items(const Rule& rule) {
  std::vector<std::string> items;
  if (!rule.dtypes.empty()) items.push_back(fmt::format("dtypes: [{}]", fmt::join(rule.dtypes, ", ")));
  if (!rule.modules.empty()) {
    std::vector<std::string> patterns;
    for (const std::string& pattern : rule.modules) patterns.push_back(pattern_spelling(pattern));
    items.push_back(fmt::format("modules: [{}]", fmt::join(patterns, ", ")));
  }
  if (!rule.when.empty()) items.push_back("when: " + conditions_str(rule.when));
  if (!rule.unless.empty()) items.push_back("unless: " + conditions_str(rule.unless));
  return items;
}

std::string args_items(const Rule& rule) {
  std::vector<std::string> items;
  for (const ArgCastRule& a : rule.args) items.push_back(fmt::format("{}: {}", a.arg, spelling(a.cast)));
  return fmt::format("args: {{{}}}", fmt::join(items, ", "));
}

// Can one value satisfy both constraints on an argument? `in` constraints hold a value set, `not
// in` ones exclude one; two exclusions always leave values (the argument types are unbounded,
// bool aside, which is not worth the special case).
bool constraints_meet(const ArgCondition* a_in, const ArgCondition* a_out, const ArgCondition* b_in, const ArgCondition* b_out) {
  const auto contains = [](const ArgCondition& c, const RuleValue& v) {
    return std::find(c.values.begin(), c.values.end(), v) != c.values.end();
  };
  std::vector<RuleValue> allowed;
  bool bounded = false;
  for (const ArgCondition* in : {a_in, b_in}) {
    if (!in) continue;
    if (!bounded) {
      allowed = in->values;
      bounded = true;
    } else {
      std::erase_if(allowed, [&](const RuleValue& v) { return !contains(*in, v); });
    }
  }
  if (!bounded) return true;
  for (const ArgCondition* out : {a_out, b_out})
    if (out) std::erase_if(allowed, [&](const RuleValue& v) { return contains(*out, v); });
  return !allowed.empty();
}

const ArgCondition* find_condition(const std::vector<ArgCondition>& conditions, const std::string& arg) {
  const auto it = std::find_if(conditions.begin(), conditions.end(), [&](const ArgCondition& c) { return c.arg == arg; });
  return it == conditions.end() ? nullptr : &*it;
}

}  // namespace

std::string Rule::condition_str() const {
  const std::vector<std::string> items = condition_items(*this);
  return items.empty() ? std::string() : fmt::format("{{{}}}", fmt::join(items, ", "));
}

std::string Rule::args_str() const { return args.empty() ? std::string() : fmt::format("{{{}}}", args_items(*this)); }

std::string Rule::str() const {
  std::vector<std::string> items = condition_items(*this);
  if (!args.empty()) items.push_back(args_items(*this));
  return items.empty() ? std::string() : fmt::format("{{{}}}", fmt::join(items, ", "));
}

bool rules_overlap(const Rule& a, const Rule& b) {
  // Note [precision by place]: a scoped entry comes first and wins inside its modules.
  if (a.modules.empty() != b.modules.empty()) return false;
  if (!a.dtypes.empty() && !b.dtypes.empty() &&
      std::none_of(a.dtypes.begin(), a.dtypes.end(),
                   [&](const std::string& d) { return std::find(b.dtypes.begin(), b.dtypes.end(), d) != b.dtypes.end(); }))
    return false;
  std::vector<std::string> args;
  for (const auto* list : {&a.when, &a.unless, &b.when, &b.unless})
    for (const ArgCondition& c : *list) args.push_back(c.arg);
  for (const std::string& arg : args)
    if (!constraints_meet(find_condition(a.when, arg), find_condition(a.unless, arg), find_condition(b.when, arg),
                          find_condition(b.unless, arg)))
      return false;
  return true;
}

std::string ModuleSection::value() const {
  switch (kind) {
    case SectionKind::fp32: return "fp32";
    case SectionKind::off: return "off";
    case SectionKind::dtype: return dtype;
    case SectionKind::fp8_on: return "{fp8: on}";
    case SectionKind::fp8_off: return "{fp8: off}";
  }
  return "fp32";
}

std::string_view ModuleSection::kind_name() const {
  switch (kind) {
    case SectionKind::fp32: return "fp32";
    case SectionKind::off: return "off";
    case SectionKind::dtype: return "dtype";
    case SectionKind::fp8_on: return "fp8_on";
    case SectionKind::fp8_off: return "fp8_off";
  }
  return "fp32";
}

std::optional<ModuleSection> parse_section_value(std::string_view value) {
  ModuleSection section;
  if (value == "fp32") section.kind = SectionKind::fp32;
  else if (value == "off") section.kind = SectionKind::off;
  else if (value == "{fp8: on}") section.kind = SectionKind::fp8_on;
  else if (value == "{fp8: off}") section.kind = SectionKind::fp8_off;
  else if (value == "float16" || value == "bfloat16") section = {"", SectionKind::dtype, std::string(value), {}, 1};
  else return std::nullopt;
  return section;
}

std::string pattern_spelling(std::string_view pattern) {
  // Plain only when YAML reads the text back unchanged as a string: names, digits, dots, `_`, `-`
  // and `*` after the first character (a leading `*` is an alias), none of YAML's special words.
  static constexpr std::string_view kWords[] = {"null", "Null", "NULL", "true", "True", "TRUE", "false", "False",
                                                "FALSE", "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON",
                                                "off", "Off", "OFF", "y", "Y", "n", "N"};
  const bool plain =
      !pattern.empty() && (std::isalpha(static_cast<unsigned char>(pattern[0])) || pattern[0] == '_') &&
      std::all_of(pattern.begin(), pattern.end(),
                  [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '*'; }) &&
      std::find(std::begin(kWords), std::end(kWords), pattern) == std::end(kWords);
  return plain ? std::string(pattern) : yaml_quoted(pattern);
}

std::string sections_str(const std::vector<ModuleSection>& sections) {
  std::vector<std::string> items;
  for (const ModuleSection& s : sections) items.push_back(fmt::format("{}: {}", pattern_spelling(s.pattern), s.value()));
  return fmt::format("{{{}}}", fmt::join(items, ", "));
}

const std::vector<DeviceInfo>& autocast_devices() {
  // The devices c10 keeps an autocast dispatch key for (c10/core/DispatchKey.h).
  static const std::vector<DeviceInfo> devices = {
      {"cpu", "AutocastCPU", "bfloat16"},   {"cuda", "AutocastCUDA", "float16"}, {"xpu", "AutocastXPU", "float16"},
      {"ipu", "AutocastIPU", "float16"},    {"hpu", "AutocastHPU", "bfloat16"},  {"xla", "AutocastXLA", "bfloat16"},
      {"mps", "AutocastMPS", "float16"},    {"mtia", "AutocastMTIA", "float16"}, {"maia", "AutocastMAIA", "bfloat16"},
      {"privateuseone", "AutocastPrivateUse1", "float16"},
  };
  return devices;
}

}  // namespace autocastgen::policy
