// Builds the template data for the torch target: one wrapper per resolved overload.
#include "emit/torch_target.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "emit/cpp_text.h"
#include "emit/policy_json.h"
#include "emit/torch_signature.h"
#include "host/hash.h"
#include "policy/resolver.h"

#ifndef AUTOCASTGEN_VERSION
#define AUTOCASTGEN_VERSION "0"
#endif

namespace autocastgen::emit {

namespace {

namespace mustache = kainjow::mustache;
using policy::PolicyKind;

constexpr size_t kWrapWidth = 72;    // parameter lists longer than this go on continuation lines
constexpr size_t kLineWidth = 100;  // generated lines stay within this many columns

// `a, b, c`, or, when longer than `width`, a newline and lines filled up to 100 columns at a
// 6-space indent.
std::string join_arguments(const std::vector<std::string>& items, size_t width = kWrapWidth, size_t indent = 6) {
  std::string flat;
  for (size_t i = 0; i < items.size(); ++i) flat += (i ? ", " : "") + items[i];
  if (flat.size() <= width) return flat;
  const std::string margin(indent, ' ');
  std::string out;
  std::string line = margin;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string piece = items[i] + (i + 1 < items.size() ? "," : "");
    if (line.size() > indent && line.size() + 1 + piece.size() > kLineWidth) {
      out += "\n" + line;
      line = margin;
    }
    line += (line.size() > indent ? " " : "") + piece;
  }
  return out + "\n" + line;
}

std::string identifier(const std::string& text) {
  std::string out;
  for (char c : text) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out.insert(out.begin(), '_');
  return out;
}

// The C++ function a wrapper is: the at::_ops name, renamed where it would be a keyword, a macro
// or a name the generated file uses (Note [names in generated wrappers]).
std::string wrapper_name(const model::OperatorName& name) { return cpp_identifier(torch_unambiguous_name(name)); }

struct Signature {
  std::string return_type;
  std::vector<std::string> param_types;
  std::vector<std::string> param_names;
  std::string function_type() const { return fmt::format("{}({})", return_type, fmt::join(param_types, ", ")); }
};

std::optional<Signature> signature_of(const model::FunctionSchema& schema, bool structured, DiagnosticEngine& diags) {
  Signature sig;
  bool ok = true;
  for (const model::Argument& arg : schema.arguments()) {
    auto type = torch_argument_type(arg.type, arg.is_write(), structured);
    if (!type) {
      diags.error(arg.location, fmt::format("the torch target has no C++ type for '{}' (argument '{}' of '{}')", arg.type.str(),
                                            arg.name, schema.name().str()));
      ok = false;
      continue;
    }
    sig.param_types.push_back(*type);
    // Two arguments may differ by the underscore cpp_identifier adds (`int` and `int_`).
    std::string name = cpp_identifier(arg.name);
    while (std::find(sig.param_names.begin(), sig.param_names.end(), name) != sig.param_names.end()) name += '_';
    sig.param_names.push_back(std::move(name));
  }
  auto ret = torch_return_type(schema.returns());
  if (!ret) {
    diags.error(schema.location(), fmt::format("the torch target has no C++ type for the returns of '{}'", schema.name().str()));
    ok = false;
  }
  if (!ok) return std::nullopt;
  sig.return_type = *ret;
  return sig;
}

// What a wrapper calls: at::_ops for aten ops, a typed dispatcher handle for other namespaces.
std::string callee(const model::FunctionSchema& schema) {
  return schema.name().is_aten() ? fmt::format("at::_ops::{}::call", torch_unambiguous_name(schema.name()))
                                : fmt::format("{}_op()", wrapper_name(schema.name()));
}

// Note [precision rules] in the wrapper: an argument an entry's `args:` names is marked with the
// cast it takes (rt::keep, rt::to_fp32, rt::to_lower_precision).
std::string marked_argument(const policy::Rule& rule, size_t index, const std::string& name) {
  for (const policy::ArgCastRule& cast : rule.args) {
    if (cast.index != index) continue;
    switch (cast.cast) {
      case policy::ArgCast::keep: return fmt::format("rt::keep({})", name);
      case policy::ArgCast::fp32: return fmt::format("rt::to_fp32({})", name);
      case policy::ArgCast::lower_precision: return fmt::format("rt::to_lower_precision({})", name);
    }
  }
  return name;
}

// A driver call's arguments (autocastgen/torch/policy_call.h): the call site, then (banned) the
// message, the op, (fp32_append_dtype) the overload it redispatches to, and the wrapper's
// arguments, fp32_set_opt_dtype's dtype marked with rt::opt_dtype. `indent` and `driver` place
// the call: `<indent>return rt::<driver><State>(` and `);` around the arguments.
std::string driver_arguments(const policy::ResolvedEntry& entry, const Signature& sig, std::string_view driver, size_t indent) {
  const model::FunctionSchema& schema = *entry.schema;
  // rt::fall_through takes the site, the op and the arguments as they came: nothing the entry adds.
  const bool through = driver == "fall_through";
  std::vector<std::string> items = {fmt::format("{{kDevice, kAutocastKey, {}}}", cpp_string_literal(schema.name().qualified()))};
  if (!through && entry.policy == PolicyKind::banned) items.push_back(fmt::format("rt::text({})", cpp_string_literal(entry.message)));
  if (!through && entry.policy == PolicyKind::fp8) items.push_back("kFp8Recipe");
  items.push_back(callee(schema));
  if (!through && entry.redispatch)
    items.push_back(entry.redispatch->name().is_aten() ? callee(*entry.redispatch)
                                                      : wrapper_name(schema.name()) + "_redispatch_op()");
  for (size_t i = 0; i < sig.param_names.size(); ++i) {
    const std::string& name = sig.param_names[i];
    if (through) items.push_back(name);
    else if (entry.policy == PolicyKind::fp32_set_opt_dtype && schema.arguments()[i].name == "dtype") items.push_back(fmt::format("rt::opt_dtype({})", name));
    else items.push_back(marked_argument(entry.rule, i, name));
  }
  const size_t around = indent + std::string_view("return rt::<State>();").size() + driver.size();
  return join_arguments(items, kLineWidth - around, indent + 4);
}

// A condition's literal as C++ for the argument's type (rt::is_one_of compares them).
std::string cpp_literal(const policy::RuleValue& value, const model::Type& type) {
  using Kind = policy::RuleValue::Kind;
  const model::Type& base = type.kind() == model::Type::Kind::optional ? type.elem() : type;
  const bool integral = base.is_base(model::BaseTy::Int) || base.is_base(model::BaseTy::SymInt);
  switch (value.kind) {
    case Kind::none: return "std::nullopt";
    case Kind::boolean: return value.boolean ? "true" : "false";
    case Kind::text: return fmt::format("rt::text({})", cpp_string_literal(value.text));  // its length kept: NUL bytes too
    case Kind::dtype:
      for (const policy::DtypeName& d : policy::dtype_names())
        if (d.name == value.text) return fmt::format("at::ScalarType::{}", d.c10);
      return "at::ScalarType::Undefined";
    case Kind::integer:
      if (integral) return fmt::format("int64_t{{{}}}", value.integer);
      return fmt::format("{}.0", value.integer);
    case Kind::real: {
      if (std::isnan(value.real)) return "rt::kNaN";
      if (std::isinf(value.real)) return value.real > 0 ? "rt::kInfinity" : "-rt::kInfinity";
      std::string text = fmt::format("{}", value.real);
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      return text;
    }
  }
  return "std::nullopt";
}

// The C++ condition under which an entry applies: its modules (`patterns`, the name of its
// rt::ModulePatterns; Note [precision by place]), its dtypes, then `when:` and `unless:`.
std::string rule_condition(const policy::Rule& rule, const model::FunctionSchema& schema, const Signature& sig,
                           const std::string& patterns) {
  std::vector<std::string> terms;
  if (!patterns.empty()) terms.push_back(patterns + ".match()");
  if (!rule.dtypes.empty()) {
    std::vector<std::string> alternatives;
    for (const std::string& dtype : rule.dtypes)
      for (const policy::DtypeName& d : policy::dtype_names())
        if (d.name == dtype) alternatives.push_back(fmt::format("lower_precision == at::ScalarType::{}", d.c10));
    terms.push_back(alternatives.size() == 1 ? alternatives.front() : fmt::format("({})", fmt::join(alternatives, " || ")));
  }
  for (const auto& [conditions, negated] : {std::pair{&rule.when, false}, std::pair{&rule.unless, true}})
    for (const policy::ArgCondition& condition : *conditions) {
      std::vector<std::string> literals;
      for (const policy::RuleValue& value : condition.values)
        literals.push_back(cpp_literal(value, schema.arguments()[condition.index].type));
      terms.push_back(fmt::format("{}rt::is_one_of({}, {})", negated ? "!" : "", sig.param_names[condition.index],
                                  fmt::join(literals, ", ")));
    }
  // `    if (` and `) {` around it; longer conditions break after each `&&`.
  const std::string flat = fmt::format("{}", fmt::join(terms, " && "));
  if (flat.size() + 12 <= kLineWidth) return flat;
  return fmt::format("{}", fmt::join(terms, " &&\n        "));
}

// A typed dispatcher handle for an op outside aten, looked up once: `{{wrapper}}_op()` for the
// wrapped op, `{{wrapper}}_redispatch_op()` for the overload fp32_append_dtype calls.
mustache::data dispatcher_handle(const model::FunctionSchema& schema, const Signature& sig) {
  mustache::data d;
  d.set("function_type", sig.function_type());
  d.set("qualified_name", cpp_string_literal(fmt::format("{}::{}", schema.name().ns, schema.name().name)));
  d.set("overload", cpp_string_literal(schema.name().overload));
  return d;
}

// The runtime's autocastgen::fp8::Recipe for a checked recipe: enumerators and dtypes by name.
mustache::data fp8_recipe_data(const policy::Fp8Recipe& recipe) {
  const auto capitalized = [](std::string name) {
    name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(name[0])));
    return name;
  };
  const auto scalar_type = [](const std::string& dtype) {
    return dtype == "float8_e4m3fn" ? std::string("Float8_e4m3fn") : std::string("Float8_e5m2");
  };
  mustache::data d;
  d.set("scaling", capitalized(recipe.scaling));
  // rowwise_with_gw_hp -> RowwiseWithGwHp: each '_'-separated word capitalised.
  const auto camel = [&](const std::string& name) {
    std::string out;
    for (size_t begin = 0; begin <= name.size();) {
      const size_t end = std::min(name.find('_', begin), name.size());
      if (end > begin) out += capitalized(name.substr(begin, end - begin));
      begin = end + 1;
    }
    return out;
  };
  d.set("granularity", camel(recipe.granularity));
  d.set("forward", scalar_type(recipe.forward));
  d.set("backward", scalar_type(recipe.backward));
  d.set("amax_history_len", std::to_string(recipe.amax_history_len));
  d.set("margin", std::to_string(recipe.margin));
  d.set("select", capitalized(recipe.select));
  return d;
}

// Where the policy gives a pattern or section, as `file:line:col` (the file as @generated lines
// name inputs: relative to the working directory, else its name); "" when unknown.
std::string where_text(const TorchTargetOptions& options, SourceLocation location) {
  return options.sources && location.valid() ? options.sources->location_text(location) : std::string();
}

// Note [precision by place]: an entry's `modules:` as the rt::ModulePatterns its condition tests,
// `{{"layers.*.attn", "policy.yaml:4:28"}, ...}`, for `const rt::ModulePatterns <name>` before it.
std::string module_patterns(const policy::ResolvedEntry& entry, const std::string& name, const TorchTargetOptions& options) {
  std::vector<std::string> items;
  for (size_t i = 0; i < entry.rule.modules.size(); ++i)
    items.push_back(fmt::format("{{{}, {}}}", cpp_string_literal(entry.rule.modules[i]),
                                cpp_string_literal(i < entry.module_locations.size() ? where_text(options, entry.module_locations[i]) : "")));
  const size_t around = std::string_view("const rt::ModulePatterns {};").size() + name.size() + 1;
  return fmt::format("{{{}}}", join_arguments(items, kLineWidth - around, 4));
}

// One overload's wrapper: its entries (one, or several with precision rules) in resolution order.
mustache::data wrapper_data(const std::vector<const policy::ResolvedEntry*>& entries, const Signature& sig,
                            const std::optional<Signature>& redispatch_sig, std::set<std::string>& headers,
                            const TorchTargetOptions& options) {
  const policy::ResolvedEntry& entry = *entries.front();
  const model::FunctionSchema& schema = *entry.schema;
  const std::string name = wrapper_name(schema.name());
  const bool aten = schema.name().is_aten();
  mustache::data d;
  d.set("schema", cpp_escaped(schema.str()));
  d.set("op", schema.name().qualified());
  // The name's parts, for templates that register through other helpers (bench/templates/kernel_macros).
  d.set("op_name", schema.name().name);
  d.set("overload", schema.name().overload);
  d.set("has_overload", !schema.name().overload.empty());
  d.set("wrapper", name);
  d.set("return_type", sig.return_type);
  d.set("function_type", sig.function_type());
  std::vector<std::string> params;
  for (size_t i = 0; i < sig.param_types.size(); ++i) params.push_back(sig.param_types[i] + " " + sig.param_names[i]);
  d.set("params", join_arguments(params));

  // aten ops are called through at::_ops (checked against it at compile time); others through a
  // typed dispatcher handle looked up once.
  d.set("check_signature", aten);
  d.set("ops_name", torch_unambiguous_name(schema.name()));
  d.set("dispatcher_handle", aten ? mustache::data(false) : dispatcher_handle(schema, sig));
  const auto redispatching = std::find_if(entries.begin(), entries.end(), [](const policy::ResolvedEntry* e) { return e->redispatch; });
  d.set("redispatch_handle", redispatching != entries.end() && !(*redispatching)->redispatch->name().is_aten()
                                 ? dispatcher_handle(*(*redispatching)->redispatch, *redispatch_sig)
                                 : mustache::data(false));
  // Note [precision rules]: a plain entry's body is one driver call; conditional entries are an
  // if-chain in resolution order, falling through to the op untouched.
  // Note [precision by place]: entries scoped to modules come first and test their patterns; when
  // a plain entry follows them it ends the chain instead of rt::fall_through.
  mustache::data rules = mustache::data::type::list;
  mustache::data patterns = mustache::data::type::list;
  bool reads_lower_precision = false;
  bool falls_through = false;
  size_t scoped = 0;
  for (const policy::ResolvedEntry* rule_entry : entries) {
    const bool conditional = rule_entry->rule.conditional();
    const std::string_view driver = policy::spelling(rule_entry->policy);
    std::string patterns_name;
    if (!rule_entry->rule.modules.empty()) {
      std::string capitalized = name;
      capitalized[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(capitalized[0])));
      patterns_name = fmt::format("k{}Modules{}", capitalized, scoped++);
      mustache::data p;
      p.set("name", patterns_name);
      p.set("patterns", module_patterns(*rule_entry, patterns_name, options));
      patterns << p;
    }
    mustache::data r;
    r.set("policy", std::string(driver));
    r.set("conditional", conditional);
    r.set("condition", conditional ? rule_condition(rule_entry->rule, schema, sig, patterns_name) : std::string());
    r.set("policy_args", driver_arguments(*rule_entry, sig, driver, conditional ? 4 : 2));
    rules << r;
    reads_lower_precision = reads_lower_precision || !rule_entry->rule.dtypes.empty();
    falls_through = conditional;
    if (rule_entry->redispatch && rule_entry->redispatch->name().is_aten())
      headers.insert(torch_ops_header(rule_entry->redispatch->name()));
  }
  d.set("policy", std::string(policy::spelling(entry.policy)));  // the first entry's (bench/templates)
  d.set("rules", rules);
  d.set("module_patterns", patterns);
  d.set("reads_lower_precision", reads_lower_precision);
  d.set("falls_through", falls_through);
  d.set("fall_through_args", falls_through ? driver_arguments(entry, sig, "fall_through", 2) : std::string());
  if (aten) headers.insert(torch_ops_header(schema.name()));
  return d;
}

std::string_view state_type(WrapperState state) {
  switch (state) {
    case WrapperState::torch: return "TorchState";
    case WrapperState::autocastgen: return "OwnState";
  }
  return "TorchState";
}

}  // namespace

std::string generated_namespace(const std::string& name) { return "autocastgen::generated::" + cpp_identifier(identifier(name)); }

std::string_view spelling(WrapperState state) {
  switch (state) {
    case WrapperState::torch: return "torch";
    case WrapperState::autocastgen: return "autocastgen";
  }
  return "torch";
}

std::optional<WrapperState> parse_wrapper_state(std::string_view text) {
  for (const WrapperState state : {WrapperState::torch, WrapperState::autocastgen})
    if (spelling(state) == text) return state;
  return std::nullopt;
}

namespace {
// `autocastgen 0.1.0 for PyTorch 2.15.0`: who made the file, for which release.
std::string generated_by(const TorchTargetOptions& options) {
  return options.torch_version ? fmt::format("autocastgen {} for PyTorch {}", AUTOCASTGEN_VERSION, options.torch_version->str())
                               : fmt::format("autocastgen {}", AUTOCASTGEN_VERSION);
}
}  // namespace

std::string shard_file_name(const std::string& name, int shard) {
  return shard <= 1 ? fmt::format("autocast_{}.cpp", name) : fmt::format("autocast_{}.shard{}.cpp", name, shard);
}

std::optional<int> shard_of_file_name(const std::string& name, std::string_view file_name) {
  const std::string prefix = fmt::format("autocast_{}.shard", name);
  constexpr std::string_view suffix = ".cpp";
  if (file_name.size() <= prefix.size() + suffix.size() || !file_name.starts_with(prefix) || !file_name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  if (digits.size() > 6 || digits.front() == '0' ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return std::nullopt;
  const int shard = std::stoi(std::string(digits));
  return shard > 1 ? std::optional<int>(shard) : std::nullopt;
}

namespace {
// One overload's wrapper with what its shard needs around it (Note [shards]).
struct WrapperPiece {
  mustache::data data;
  std::set<std::string> headers;  // the ATen op headers it calls
  std::string ns;                 // the namespace it registers in
  mustache::data registration;
  bool uses_fp8_recipe = false;
};

// `ns` entries with their registrations, namespaces in first-use order.
mustache::data namespace_list(std::vector<WrapperPiece>::const_iterator begin, std::vector<WrapperPiece>::const_iterator end) {
  std::vector<std::string> order;
  std::map<std::string, mustache::data> registrations;
  for (auto piece = begin; piece != end; ++piece) {
    if (!registrations.count(piece->ns)) {
      order.push_back(piece->ns);
      registrations[piece->ns] = mustache::data::type::list;
    }
    registrations[piece->ns] << piece->registration;
  }
  mustache::data list = mustache::data::type::list;
  for (const std::string& ns : order) {
    mustache::data n;
    n.set("ns", ns);
    n.set("registrations", registrations[ns]);
    list << n;
  }
  return list;
}
}  // namespace

std::optional<std::vector<GeneratedFile>> emit_torch_target(const model::SchemaSet& schemas, const policy::ResolvedPolicy& policy,
                                                            const TorchTargetOptions& options,
                                                            const TemplateSet& templates, DiagnosticEngine& diags) {
  const size_t errors_before = diags.error_count();
  if (options.shards < 1 || options.shards > kMaxShards) {
    diags.error({}, fmt::format("the number of shards must be between 1 and {}, not {}", kMaxShards, options.shards));
    return std::nullopt;
  }
  std::vector<WrapperPiece> pieces;
  // An overload's entries stand together in a resolved policy (Note [precision rules]).
  for (size_t first = 0; first < policy.entries.size();) {
    std::vector<const policy::ResolvedEntry*> group;
    const policy::ResolvedEntry& entry = policy.entries[first];
    for (; first < policy.entries.size() && policy.entries[first].schema == entry.schema; ++first) group.push_back(&policy.entries[first]);
    std::optional<Signature> sig = signature_of(*entry.schema, schemas.attributes(*entry.schema).structured, diags);
    std::optional<Signature> redispatch_sig;
    const auto redispatching = std::find_if(group.begin(), group.end(), [](const policy::ResolvedEntry* e) { return e->redispatch; });
    if (redispatching != group.end())
      redispatch_sig = signature_of(*(*redispatching)->redispatch, schemas.attributes(*(*redispatching)->redispatch).structured, diags);
    if (!sig || (redispatching != group.end() && !redispatch_sig)) continue;
    const model::OperatorName& name = entry.schema->name();
    if (is_reserved_cpp_name(name.namespace_or_aten())) {  // TORCH_LIBRARY_IMPL would expand or reject it
      diags.error(entry.schema->location(), fmt::format("generated C++ cannot register ops of the namespace '{}': it is a C++ keyword or "
                                                        "a macro's name (runtime policies can: load_policy)", name.namespace_or_aten()));
      continue;
    }
    WrapperPiece piece;
    piece.data = wrapper_data(group, *sig, redispatch_sig, piece.headers, options);
    piece.ns = std::string(name.namespace_or_aten());
    piece.registration.set("op", cpp_string_literal(name.unqualified()));
    piece.registration.set("qualified", cpp_string_literal(fmt::format("{}::{}", piece.ns, name.unqualified())));
    piece.registration.set("wrapper", wrapper_name(name));
    piece.uses_fp8_recipe = std::any_of(group.begin(), group.end(), [](const policy::ResolvedEntry* e) { return e->policy == PolicyKind::fp8; });
    pieces.push_back(std::move(piece));
  }
  if (diags.error_count() != errors_before) return std::nullopt;

  mustache::data data;
  std::vector<std::string> digests;
  mustache::data inputs = mustache::data::type::list;
  for (const InputDigest& input : options.inputs) {
    digests.push_back(fmt::format("{}@{}", cpp_escaped(input.name), input.sha256.substr(0, 12)));
    mustache::data i;
    i.set("name", cpp_escaped(input.name));
    i.set("sha256", input.sha256);
    inputs << i;
  }
  data.set("generated_by", generated_by(options));
  data.set("input_digests", fmt::format("{}", fmt::join(digests, " ")));
  // What the library does (Note [policies in the trace key] in the runtime's state/traced.cpp).
  const std::string identity =
      sha256_hex(fmt::format("{}\n{} {}\n{}", generated_by(options), spelling(options.state), options.name, policy.behaviour_str()))
          .substr(0, 32);
  data.set("inputs", inputs);
  data.set("device", policy.device);
  data.set("device_type", torch_device_type(policy.device));
  data.set("dispatch_key", policy.dispatch_key);
  std::vector<std::string> counts;
  for (PolicyKind kind : policy::kAllPolicies)
    if (policy.count(kind)) counts.push_back(fmt::format("{} {}", policy.count(kind), policy::spelling(kind)));
  const std::string summary = fmt::format("{}", fmt::join(counts, ", "));
  data.set("summary", summary);
  data.set("cpp_namespace", generated_namespace(options.name));
  data.set("state", std::string(spelling(options.state)));
  data.set("state_type", std::string(state_type(options.state)));
  // Note [precision by place]: the `modules:` section, registered once (in shard 1).
  mustache::data sections;
  {
    mustache::data rules = mustache::data::type::list;
    for (const policy::ModuleSection& section : policy.sections) {
      std::string dtype = "Undefined";
      for (const policy::DtypeName& d : policy::dtype_names())
        if (section.kind == policy::SectionKind::dtype && d.name == section.dtype) dtype = std::string(d.c10);
      const std::string kind(section.kind_name());
      const std::vector<std::string> fields = {cpp_string_literal(section.pattern), fmt::format("rt::SectionKind::{}", kind),
                                               fmt::format("c10::ScalarType::{}", dtype),
                                               cpp_string_literal(where_text(options, section.location))};
      rules << mustache::data("rule", fmt::format("{{{}}}", join_arguments(fields, kLineWidth - 11, 12)));
    }
    sections.set("owner", cpp_string_literal(policy.name));
    sections.set("rules", rules);
  }
  // Every registration of the policy, whichever shard holds it (the key claim lists them all).
  const mustache::data all_namespaces = namespace_list(pieces.begin(), pieces.end());

  std::vector<GeneratedFile> files;
  const size_t shards = static_cast<size_t>(options.shards);
  size_t begin = 0;
  for (size_t shard = 0; shard < shards; ++shard) {
    // Note [shards]: contiguous groups, sizes differing by at most one, the larger ones first.
    const size_t end = begin + pieces.size() / shards + (shard < pieces.size() % shards ? 1 : 0);
    const auto first_piece = pieces.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto last_piece = pieces.begin() + static_cast<std::ptrdiff_t>(end);
    const bool first_shard = shard == 0;
    std::set<std::string> headers;
    mustache::data wrappers = mustache::data::type::list;
    bool uses_fp8_recipe = false;
    for (auto piece = first_piece; piece != last_piece; ++piece) {
      headers.insert(piece->headers.begin(), piece->headers.end());
      wrappers << piece->data;
      uses_fp8_recipe = uses_fp8_recipe || piece->uses_fp8_recipe;
    }
    mustache::data header_list = mustache::data::type::list;
    for (const std::string& h : headers) header_list << mustache::data("header", h);
    data.set("headers", header_list);
    data.set("wrappers", wrappers);
    data.set("namespaces", namespace_list(first_piece, last_piece));
    // Note [shards in the built-in template]: the built-in templates' sha256 is in every output's
    // header, so they did not change for shards (one shard is byte for byte the unsharded file).
    // A shard says which it is in the header's summary line, and the key claim takes the whole
    // list from its own section's context (`namespaces` there is every registration).
    const std::string held = end - begin == 1 ? fmt::format("wrapper {}", end) : fmt::format("wrappers {}-{}", begin + 1, end);
    const std::string contents = begin == end ? fmt::format("none of the {} wrappers", pieces.size())
                                              : fmt::format("{} of {}, registered here", held, pieces.size());
    data.set("summary", options.shards > 1 ? fmt::format("{}; shard {} of {}: {}", summary, shard + 1, shards, contents) : summary);
    // What exists once per library lives in shard 1.
    data.set("fallthrough", options.fallthrough && first_shard);
    data.set("identity", first_shard ? mustache::data(identity) : mustache::data(false));
    // Note [claiming the key]: a library with autocastgen's own state owns its key.
    mustache::data claim;
    claim.set("namespaces", all_namespaces);
    data.set("claims_key", options.state == WrapperState::autocastgen && first_shard ? claim : mustache::data(false));
    data.set("fp8_recipe", policy.fp8 && uses_fp8_recipe ? fp8_recipe_data(*policy.fp8) : mustache::data(false));
    data.set("sections", first_shard && !policy.sections.empty() ? sections : mustache::data(false));
    std::optional<std::string> cpp = templates.render("autocast.cpp", data, diags);
    if (!cpp) return std::nullopt;
    // Note [data in generated code]: a raw control byte would be data that missed cpp_escaped (or a
    // template's own), which a compiler may read as a line break.
    if (const std::optional<size_t> at = find_raw_control_byte(*cpp)) {
      const size_t line = static_cast<size_t>(std::count(cpp->begin(), cpp->begin() + static_cast<std::ptrdiff_t>(*at), '\n')) + 1;
      diags.error({}, fmt::format("internal error: the generated {} would hold the raw byte 0x{:02x} on line {}; nothing was written",
                                  shard_file_name(options.name, static_cast<int>(shard) + 1), static_cast<unsigned char>((*cpp)[*at]), line));
      return std::nullopt;
    }
    files.push_back({shard_file_name(options.name, static_cast<int>(shard) + 1), std::move(*cpp)});
    begin = end;
  }
  // A file name that is not UTF-8 (an input's) is written with U+FFFD: nlohmann's dump would throw.
  files.push_back({fmt::format("autocast_{}.manifest.json", options.name),
                   torch_manifest(policy, options).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n"});
  return files;
}

nlohmann::ordered_json torch_manifest(const policy::ResolvedPolicy& policy, const TorchTargetOptions& options) {
  nlohmann::ordered_json m;
  m["generated_by"] = generated_by(options);
  m["torch_version"] = options.torch_version ? nlohmann::ordered_json(options.torch_version->str()) : nlohmann::ordered_json();
  m["target"] = "torch";
  m["state"] = spelling(options.state);
  m["device"] = policy.device;
  m["dispatch_key"] = policy.dispatch_key;
  m["lower_precision"] = policy.lower_precision;
  if (policy.fp8) m["fp8"] = fp8_recipe_json(*policy.fp8);
  if (!policy.sections.empty()) m["modules"] = sections_json(policy.sections);  // Note [precision by place]
  m["inputs"] = nlohmann::ordered_json::array();
  for (const InputDigest& input : options.inputs) m["inputs"].push_back({{"name", input.name}, {"sha256", input.sha256}});
  m["ops"] = nlohmann::ordered_json::array();
  const std::string ns = generated_namespace(options.name);
  for (const policy::ResolvedEntry& entry : policy.entries) {
    nlohmann::ordered_json op = entry_json(entry);
    op["wrapper"] = ns + "::" + wrapper_name(entry.schema->name());
    op["dispatch_key"] = policy.dispatch_key;
    m["ops"].push_back(std::move(op));
  }
  return m;
}

}  // namespace autocastgen::emit
