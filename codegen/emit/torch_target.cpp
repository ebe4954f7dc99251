// Builds the template data for the torch target: one wrapper per resolved overload.
#include "emit/torch_target.h"

#include <cctype>
#include <set>

#include <fmt/format.h>

#include "emit/policy_json.h"
#include "emit/torch_signature.h"
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
std::string join_arguments(const std::vector<std::string>& items, size_t width = kWrapWidth) {
  std::string flat;
  for (size_t i = 0; i < items.size(); ++i) flat += (i ? ", " : "") + items[i];
  if (flat.size() <= width) return flat;
  std::string out;
  std::string line = "      ";
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string piece = items[i] + (i + 1 < items.size() ? "," : "");
    if (line.size() > 6 && line.size() + 1 + piece.size() > 100) {
      out += "\n" + line;
      line = "      ";
    }
    line += (line.size() > 6 ? " " : "") + piece;
  }
  return out + "\n" + line;
}

std::string cpp_string_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out.push_back(c);
    }
  }
  return out + "\"";
}

std::string identifier(const std::string& text) {
  std::string out;
  for (char c : text) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out.insert(out.begin(), '_');
  return out;
}

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
    sig.param_names.push_back(cpp_identifier(arg.name));
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
                                : fmt::format("{}_op()", torch_unambiguous_name(schema.name()));
}

// The wrapper's body is one call of its policy's driver (autocastgen/torch/policy_call.h): the
// call site, then (banned) the message, the op, (fp32_append_dtype) the overload it redispatches
// to, and the wrapper's arguments, fp32_set_opt_dtype's dtype marked with rt::opt_dtype.
std::string policy_call_arguments(const policy::ResolvedEntry& entry, const Signature& sig) {
  const model::FunctionSchema& schema = *entry.schema;
  std::vector<std::string> items = {fmt::format("{{kDevice, kAutocastKey, \"{}\"}}", schema.name().qualified())};
  if (entry.policy == PolicyKind::banned) items.push_back(cpp_string_literal(entry.message));
  if (entry.policy == PolicyKind::fp8) items.push_back("kFp8Recipe");
  items.push_back(callee(schema));
  if (entry.redispatch)
    items.push_back(entry.redispatch->name().is_aten() ? callee(*entry.redispatch)
                                                      : torch_unambiguous_name(schema.name()) + "_redispatch_op()");
  for (size_t i = 0; i < sig.param_names.size(); ++i) {
    const bool dtype = entry.policy == PolicyKind::fp32_set_opt_dtype && schema.arguments()[i].name == "dtype";
    items.push_back(dtype ? fmt::format("rt::opt_dtype({})", sig.param_names[i]) : sig.param_names[i]);
  }
  // `  return rt::<policy><State>(` and `);` around the arguments.
  const size_t around = std::string_view("  return rt::<State>();").size() + policy::spelling(entry.policy).size();
  return join_arguments(items, kLineWidth - around);
}

// A typed dispatcher handle for an op outside aten, looked up once: `{{wrapper}}_op()` for the
// wrapped op, `{{wrapper}}_redispatch_op()` for the overload fp32_append_dtype calls.
mustache::data dispatcher_handle(const model::FunctionSchema& schema, const Signature& sig) {
  mustache::data d;
  d.set("function_type", sig.function_type());
  d.set("qualified_name", fmt::format("{}::{}", schema.name().ns, schema.name().name));
  d.set("overload", schema.name().overload);
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
  d.set("granularity", capitalized(recipe.granularity));
  d.set("forward", scalar_type(recipe.forward));
  d.set("backward", scalar_type(recipe.backward));
  d.set("amax_history_len", std::to_string(recipe.amax_history_len));
  d.set("margin", std::to_string(recipe.margin));
  return d;
}

mustache::data wrapper_data(const policy::ResolvedEntry& entry, const Signature& sig,
                            const std::optional<Signature>& redispatch_sig, std::set<std::string>& headers) {
  const model::FunctionSchema& schema = *entry.schema;
  const std::string name = torch_unambiguous_name(schema.name());
  const bool aten = schema.name().is_aten();
  mustache::data d;
  d.set("schema", schema.str());
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
  d.set("ops_name", name);
  d.set("dispatcher_handle", aten ? mustache::data(false) : dispatcher_handle(schema, sig));
  d.set("redispatch_handle", entry.redispatch && !entry.redispatch->name().is_aten()
                                 ? dispatcher_handle(*entry.redispatch, *redispatch_sig)
                                 : mustache::data(false));
  d.set("policy", std::string(policy::spelling(entry.policy)));
  d.set("policy_args", policy_call_arguments(entry, sig));
  if (aten) headers.insert(torch_ops_header(schema.name()));
  if (entry.redispatch && entry.redispatch->name().is_aten()) headers.insert(torch_ops_header(entry.redispatch->name()));
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

std::string generated_namespace(const std::string& name) { return "autocastgen::generated::" + identifier(name); }

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

std::optional<std::vector<GeneratedFile>> emit_torch_target(const model::SchemaSet& schemas, const policy::ResolvedPolicy& policy,
                                                            const TorchTargetOptions& options,
                                                            const TemplateSet& templates, DiagnosticEngine& diags) {
  const size_t errors_before = diags.error_count();
  mustache::data wrappers = mustache::data::type::list;
  std::set<std::string> headers;
  std::vector<std::string> namespaces;  // in first-use order
  std::map<std::string, mustache::data> registrations;
  for (const policy::ResolvedEntry& entry : policy.entries) {
    std::optional<Signature> sig = signature_of(*entry.schema, schemas.attributes(*entry.schema).structured, diags);
    std::optional<Signature> redispatch_sig;
    if (entry.redispatch)
      redispatch_sig = signature_of(*entry.redispatch, schemas.attributes(*entry.redispatch).structured, diags);
    if (!sig || (entry.redispatch && !redispatch_sig)) continue;
    wrappers << wrapper_data(entry, *sig, redispatch_sig, headers);
    const model::OperatorName& name = entry.schema->name();
    const std::string ns(name.namespace_or_aten());
    if (!registrations.count(ns)) {
      namespaces.push_back(ns);
      registrations[ns] = mustache::data::type::list;
    }
    mustache::data reg;
    reg.set("op", name.unqualified());
    reg.set("wrapper", torch_unambiguous_name(name));
    registrations[ns] << reg;
  }
  if (diags.error_count() != errors_before) return std::nullopt;

  mustache::data data;
  std::vector<std::string> digests;
  mustache::data inputs = mustache::data::type::list;
  for (const InputDigest& input : options.inputs) {
    digests.push_back(fmt::format("{}@{}", input.name, input.sha256.substr(0, 12)));
    mustache::data i;
    i.set("name", input.name);
    i.set("sha256", input.sha256);
    inputs << i;
  }
  data.set("generated_by", generated_by(options));
  data.set("input_digests", fmt::format("{}", fmt::join(digests, " ")));
  data.set("inputs", inputs);
  data.set("device", policy.device);
  data.set("device_type", torch_device_type(policy.device));
  data.set("dispatch_key", policy.dispatch_key);
  std::vector<std::string> counts;
  for (PolicyKind kind : policy::kAllPolicies)
    if (policy.count(kind)) counts.push_back(fmt::format("{} {}", policy.count(kind), policy::spelling(kind)));
  data.set("summary", fmt::format("{}", fmt::join(counts, ", ")));
  data.set("cpp_namespace", generated_namespace(options.name));
  mustache::data header_list = mustache::data::type::list;
  for (const std::string& h : headers) header_list << mustache::data("header", h);
  data.set("headers", header_list);
  data.set("wrappers", wrappers);
  mustache::data ns_list = mustache::data::type::list;
  for (const std::string& ns : namespaces) {
    mustache::data n;
    n.set("ns", ns);
    n.set("registrations", registrations[ns]);
    ns_list << n;
  }
  data.set("namespaces", ns_list);
  data.set("fallthrough", options.fallthrough);
  data.set("state", std::string(spelling(options.state)));
  data.set("state_type", std::string(state_type(options.state)));
  // Note [claiming the key]: a library with autocastgen's own state owns its key.
  data.set("claims_key", options.state == WrapperState::autocastgen);
  data.set("fp8_recipe", policy.fp8 && policy.count(PolicyKind::fp8) ? fp8_recipe_data(*policy.fp8) : mustache::data(false));

  std::optional<std::string> cpp = templates.render("autocast.cpp", data, diags);
  if (!cpp) return std::nullopt;
  std::vector<GeneratedFile> files;
  files.push_back({fmt::format("autocast_{}.cpp", options.name), std::move(*cpp)});
  files.push_back({fmt::format("autocast_{}.manifest.json", options.name), torch_manifest(policy, options).dump(2) + "\n"});
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
  m["inputs"] = nlohmann::ordered_json::array();
  for (const InputDigest& input : options.inputs) m["inputs"].push_back({{"name", input.name}, {"sha256", input.sha256}});
  m["ops"] = nlohmann::ordered_json::array();
  const std::string ns = generated_namespace(options.name);
  for (const policy::ResolvedEntry& entry : policy.entries) {
    nlohmann::ordered_json op = entry_json(entry);
    op["wrapper"] = ns + "::" + torch_unambiguous_name(entry.schema->name());
    op["dispatch_key"] = policy.dispatch_key;
    m["ops"].push_back(std::move(op));
  }
  return m;
}

}  // namespace autocastgen::emit
