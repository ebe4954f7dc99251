// Runtime policies: one boxed kernel runs the six policies for any op through the per-policy drivers
// that generated wrappers use (policy_call.h). Names, policies and devices are checked by the
// policy core that the CLI uses (codegen's policy/), against the schemas registered with the
// dispatcher now, so the errors are the CLI's.
#include "autocastgen/runtime/runtime_policy.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>
#include <torch/version.h>

#include "autocastgen/runtime/cast_cache.h"
#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/state.h"
#include "autocastgen/torch/policy_call.h"
#include "boxed_args.h"
#include "insight/log.h"
#include "model/schema_set.h"
#include "policy/policy_file.h"
#include "policy/resolver.h"
#include "schema/parser.h"
#include "state/state_internal.h"
#include "support/diagnostics.h"
#include "support/paths.h"
#include "support/source_manager.h"
#include "support/strings.h"
#include "support/yaml.h"
#include "bookkeeping_op.h"

namespace autocastgen {
namespace {
// Release gates in runtime policies compare with the PyTorch this library was built against.
policy::ResolveTarget running_release() {
  return {model::TorchVersion(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH)};
}
}  // namespace

namespace {

using policy::PolicyKind;
using torch::ArgKind;
using torch::BoxedArgs;

ArgKind arg_kind(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.real_type();
  if (type->kind() == c10::TypeKind::TensorType) return ArgKind::tensor;
  if (const auto optional = type->cast<c10::OptionalType>())
    return optional->getElementType()->kind() == c10::TypeKind::TensorType ? ArgKind::optional_tensor : ArgKind::other;
  if (const auto list = type->cast<c10::ListType>()) {
    const c10::TypePtr& element = list->getElementType();
    if (element->kind() == c10::TypeKind::TensorType) return ArgKind::tensor_list;
    if (const auto optional = element->cast<c10::OptionalType>())
      if (optional->getElementType()->kind() == c10::TypeKind::TensorType) return ArgKind::optional_tensor_list;
  }
  return ArgKind::other;
}

// A condition of a rule: argument `index` against its values (Note [precision rules]).
struct ConditionSpec {
  size_t index;
  std::vector<policy::RuleValue> values;
};

// One entry of the op's policy, fixed at registration.
struct RuleSpec {
  PolicyKind policy;
  std::vector<at::ScalarType> dtypes;  // empty: every lower-precision dtype
  std::vector<ConditionSpec> when;
  std::vector<ConditionSpec> unless;
  std::vector<torch::ArgOverride> overrides;        // `args:`, one per argument; empty: none
  std::optional<size_t> dtype_arg;                  // fp32_set_opt_dtype
  std::optional<c10::OperatorHandle> redispatch;    // fp32_append_dtype
  std::string message;                              // banned
  std::optional<fp8::Recipe> fp8_recipe;            // fp8
  // `modules:` (Note [precision by place]): held by the Registry while the policy is installed, so
  // that a cleared policy's patterns leave the table though its kernel lives on (Note [replacing a
  // runtime policy while it runs]); a late call of a cleared rule matches no module.
  bool scoped = false;
  std::weak_ptr<const modules::Patterns> modules;
};

// Everything the kernel needs, fixed at registration.
struct KernelSpec {
  c10::OperatorHandle handle;
  std::string ns;           // the op's namespace
  std::string unqualified;  // `name[.overload]`
  std::string op;           // `ns::name[.overload]`
  c10::DeviceType device;
  c10::DispatchKey key;
  std::vector<ArgKind> args;
  std::vector<RuleSpec> rules;  // one, or several conditional ones (Note [precision rules])
  std::vector<std::shared_ptr<const modules::Patterns>> patterns;  // the rules' `modules:`, owned until installed
};

// An argument on the stack against a condition's literal, as the generated rt::is_one_of compares
// them: numbers by value, a symbolic SymInt matching no number.
bool matches(const c10::IValue& value, const policy::RuleValue& literal) {
  using Kind = policy::RuleValue::Kind;
  if (literal.kind == Kind::none) return value.isNone();
  using torch::detail::same_number;
  switch (literal.kind) {
    case Kind::boolean: return value.isBool() && value.toBool() == literal.boolean;
    case Kind::text: return value.isString() && value.toStringRef() == literal.text;
    case Kind::dtype: return value.isInt() && value.toInt() == literal.integer;
    case Kind::integer:
    case Kind::real: {
      const double number = literal.kind == Kind::integer ? static_cast<double>(literal.integer) : literal.real;
      if (value.isInt()) return literal.kind == Kind::integer ? value.toInt() == literal.integer : same_number(static_cast<double>(value.toInt()), number);
      if (value.isDouble()) return same_number(value.toDouble(), number);
      if (value.isSymInt()) {
        const std::optional<int64_t> known = value.toSymInt().maybe_as_int();
        return known && literal.kind == Kind::integer && *known == literal.integer;
      }
      return false;
    }
    case Kind::none: break;  // answered above
  }
  return false;
}

bool is_one_of(const c10::IValue& value, const std::vector<policy::RuleValue>& literals) {
  return std::any_of(literals.begin(), literals.end(), [&](const policy::RuleValue& l) { return matches(value, l); });
}

// The first rule whose dtypes and conditions the call meets; null: the call falls through.
template <typename State>
const RuleSpec* select_rule(const KernelSpec& spec, const c10::Stack& stack, size_t base) {
  std::optional<at::ScalarType> lower;
  for (const RuleSpec& rule : spec.rules) {
    if (rule.scoped) {
      const std::shared_ptr<const modules::Patterns> patterns = rule.modules.lock();
      if (!patterns || !patterns->match()) continue;
    }
    if (!rule.dtypes.empty()) {
      if (!lower) lower = torch::lower_precision<State>(spec.device);
      if (std::find(rule.dtypes.begin(), rule.dtypes.end(), *lower) == rule.dtypes.end()) continue;
    }
    const auto holds = [&](const ConditionSpec& c) { return is_one_of(stack[base + c.index], c.values); };
    if (!std::all_of(rule.when.begin(), rule.when.end(), holds)) continue;
    if (std::any_of(rule.unless.begin(), rule.unless.end(), holds)) continue;
    return &rule;
  }
  return nullptr;
}

// One boxed call through the per-policy driver of the rule it matches (policy_call.h), as the
// generated wrapper of the same policy and state would make it.
template <typename State>
void run_policy(const KernelSpec& spec, const c10::OperatorHandle& op, c10::Stack* stack) {
  const torch::Site site{spec.device, spec.key, spec.op.c_str()};
  const size_t base = stack->size() - spec.args.size();
  const auto call = [&](const BoxedArgs&) { op.callBoxed(stack); };
  const RuleSpec* rule = select_rule<State>(spec, *stack, base);
  if (rule == nullptr) return torch::fall_through<State>(site, call, BoxedArgs{stack, base, &spec.args, std::nullopt});
  const RuleSpec& r = *rule;
  const BoxedArgs args{stack, base, &spec.args, r.dtype_arg, r.overrides.empty() ? nullptr : &r.overrides};
  switch (r.policy) {
    case PolicyKind::lower_precision_fp: return torch::lower_precision_fp<State>(site, call, args);
    case PolicyKind::fp32: return torch::fp32<State>(site, call, args);
    case PolicyKind::promote: return torch::promote<State>(site, call, args);
    case PolicyKind::fp32_set_opt_dtype: return torch::fp32_set_opt_dtype<State>(site, call, args);
    case PolicyKind::fp32_append_dtype: {
      const auto redispatch = [&](const BoxedArgs&, at::ScalarType dtype) {
        stack->emplace_back(static_cast<int64_t>(dtype));
        r.redispatch->callBoxed(stack);
      };
      return torch::fp32_append_dtype<State>(site, call, redispatch, args);
    }
    case PolicyKind::banned: return torch::banned<State>(site, r.message, call, args);
    case PolicyKind::fp8: return torch::fp8<State>(site, *r.fp8_recipe, call, args);
  }
}

// Note [replacing a runtime policy while it runs]
// The dispatcher calls a kernel through a raw pointer to its functor, read from the op's dispatch
// table without a lock; registering or dropping a library rewrites that entry and drops the
// functor's reference. A thread already inside (or about to enter) a dropped functor would use
// freed memory (issue 19: replacing or clearing a policy while other threads call the op). So:
//  - one functor per (op, autocast key) stays installed while the op has a runtime policy;
//    replacing the policy swaps in a new immutable KernelSpec, and every call takes a reference to
//    the spec once and holds it to the end: a call finishes with the policy it started with, and a new call
//    sees the old or the new one;
//  - clear_runtime_policies drops the registrations (the replaced kernels come back), but every
//    functor ever installed is kept alive by the Registry, never freed: a call that read the table
//    before the drop still runs a live functor. A functor is a few words (its spec is freed by the
//    last call holding it, or on the next replacement); one is kept per registration after a clear;
//  - registrations, replacements and clears are serialised by the Registry's mutex;
//  - the dispatcher publishes a new kernel with a plain store into its table, which callers read
//    without a lock: ordered on the hardware, but not in the C++ memory model (ThreadSanitizer
//    reports the functor's construction against its first call). g_published supplies the
//    release/acquire pair: bumped after a functor is built, read on entry to every call.
std::atomic<uint64_t> g_published{0};

class RuntimePolicyKernel final : public c10::OperatorKernel {
 public:
  explicit RuntimePolicyKernel(std::shared_ptr<const KernelSpec> spec) : spec_(std::move(spec)) {}

  void replace(std::shared_ptr<const KernelSpec> next) {
    const std::lock_guard<std::mutex> lock(spec_mutex_);
    spec_.swap(next);  // the old spec is released after the lock, by the last call holding it
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, c10::Stack* stack) const {
    (void)g_published.load(std::memory_order_acquire);
    const std::shared_ptr<const KernelSpec> held = current();
    const KernelSpec& spec = *held;
    // The op may have been dropped and defined again with another schema since registration.
    TORCH_CHECK(op.schema().arguments().size() == spec.args.size(), "autocastgen: the runtime policy for ", spec.op,
                " was registered for another schema of it (", spec.args.size(), " arguments, now ",
                op.schema().arguments().size(), "); register the policy again");
    // autocastgen's state while an AutocastScope is open for the device, else PyTorch's (the
    // kernel runs only while its key is included).
    if (detail::thread_device_state(spec.device).nesting > 0) run_policy<torch::OwnState>(spec, op, stack);
    else run_policy<torch::TorchState>(spec, op, stack);
  }
  // The spec calls start with now (Note [a policy for one export] keeps it to put it back).
  [[nodiscard]] std::shared_ptr<const KernelSpec> current() const {
    const std::lock_guard<std::mutex> lock(spec_mutex_);
    return spec_;
  }

 private:
  // A mutex, not std::atomic<std::shared_ptr>: libstdc++ 12's unlocks its load with a relaxed
  // store, which ThreadSanitizer reports; an uncontended lock costs about the same.
  mutable std::mutex spec_mutex_;
  std::shared_ptr<const KernelSpec> spec_;
};


std::string namespace_of(std::string_view qualified) {
  const size_t colons = qualified.find("::");
  return std::string(colons == std::string_view::npos ? std::string_view("aten") : qualified.substr(0, colons));
}

// The dispatcher's schemas of `namespaces` (all when empty) in the policy model. Schemas the
// native_functions grammar cannot read (TorchScript-only types such as Any) are left out, with
// the parser's message kept by `ns::name[.overload]`.
struct RegisteredSchemas {
  model::SchemaSet schemas;
  std::map<std::string, std::string> unreadable;
};

RegisteredSchemas registered_schemas(const std::set<std::string>& namespaces) {
  SourceManager sources;
  RegisteredSchemas result;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (!namespaces.empty() && !namespaces.count(namespace_of(name.name))) continue;
    const std::optional<c10::OperatorHandle> handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle || !handle->hasSchema()) continue;
    std::ostringstream text;
    text << handle->schema();
    const uint32_t file = sources.add_buffer(detail::qualified_name(name), text.str());
    // An engine per schema: one keeps only its first errors (Note [diagnostics are bounded]).
    std::ostringstream discarded;
    DiagnosticEngine diags(sources, discarded);
    if (std::optional<model::FunctionSchema> schema =
            schema::parse_function_schema(sources.text(file), schema::SchemaSource{sources.start_of(file)}, diags))
      (void)result.schemas.add(std::move(*schema));
    else if (!diags.diagnostics().empty())
      result.unreadable.emplace(detail::qualified_name(name), diags.diagnostics().back().message);
  }
  return result;
}

// c10::parseDispatchKey fills a function-local static map in libc10 on first use: thread-safe,
// but uninstrumented, so ThreadSanitizer reports concurrent first calls. Ours go one at a time.
c10::DispatchKey dispatch_key_of(const std::string& key) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  return c10::parseDispatchKey(key);
}

c10::DeviceType device_type_of(const std::string& device) {
  if (device == "privateuseone") return c10::DeviceType::PrivateUse1;
  return c10::Device(device).type();
}

// The runtime's recipe for a checked policy recipe (Note [fp8 recipe]).
fp8::Recipe runtime_recipe(const policy::Fp8Recipe& recipe) {
  fp8::Recipe out;
  out.scaling = *fp8::parse_scaling(recipe.scaling);
  out.granularity = *fp8::parse_granularity(recipe.granularity);
  out.forward_dtype = *fp8::parse_fp8_dtype(recipe.forward);
  out.backward_dtype = *fp8::parse_fp8_dtype(recipe.backward);
  out.amax_history_len = recipe.amax_history_len;
  out.margin = recipe.margin;
  out.select = *fp8::parse_select(recipe.select);
  out.validate();
  return out;
}

at::ScalarType scalar_type_named(const std::string& dtype) {
  for (const policy::DtypeName& d : policy::dtype_names())
    if (d.name == dtype) return static_cast<at::ScalarType>(d.code);
  TORCH_CHECK(false, "autocastgen: unknown dtype ", dtype);
}

// Where a policy's text stands, for the module patterns' `where` (attach()'s warnings).
using Where = std::function<std::string(SourceLocation)>;

RuleSpec rule_spec(const policy::ResolvedEntry& entry, const policy::ResolvedPolicy& resolved, const c10::OperatorHandle& handle,
                   const std::string& ns, const Where& where, std::vector<std::shared_ptr<const modules::Patterns>>& owned) {
  RuleSpec rule{.policy = entry.policy,
                .dtypes = {},
                .when = {},
                .unless = {},
                .overrides = {},
                .dtype_arg = std::nullopt,
                .redispatch = std::nullopt,
                .message = entry.message,
                .fp8_recipe = std::nullopt,
                .scoped = false,
                .modules = {}};
  const auto& arguments = handle.schema().arguments();
  for (const std::string& dtype : entry.rule.dtypes) rule.dtypes.push_back(scalar_type_named(dtype));
  for (const policy::ArgCondition& c : entry.rule.when) rule.when.push_back({c.index, c.values});
  for (const policy::ArgCondition& c : entry.rule.unless) rule.unless.push_back({c.index, c.values});
  if (!entry.rule.args.empty()) {
    rule.overrides.assign(arguments.size(), torch::ArgOverride::follow);
    for (const policy::ArgCastRule& a : entry.rule.args)
      rule.overrides.at(a.index) = a.cast == policy::ArgCast::keep   ? torch::ArgOverride::keep
                                   : a.cast == policy::ArgCast::fp32 ? torch::ArgOverride::fp32
                                                                     : torch::ArgOverride::lower_precision;
  }
  if (entry.policy == PolicyKind::fp32_set_opt_dtype)
    for (size_t i = 0; i < arguments.size(); ++i)
      if (arguments[i].name() == "dtype") rule.dtype_arg = i;
  if (entry.policy == PolicyKind::fp8) rule.fp8_recipe = runtime_recipe(*resolved.fp8);
  if (!entry.rule.modules.empty()) {
    const std::string at = where(entry.location);
    std::vector<modules::PatternSource> patterns;
    for (const std::string& pattern : entry.rule.modules) patterns.push_back({pattern, at});
    owned.push_back(std::make_shared<const modules::Patterns>(patterns));
    rule.scoped = true;
    rule.modules = owned.back();
  }
  if (entry.redispatch) {
    const model::OperatorName& sibling = entry.redispatch->name();
    rule.redispatch = c10::Dispatcher::singleton().findSchemaOrThrow((ns + "::" + sibling.name).c_str(), sibling.overload.c_str());
  }
  return rule;
}

// One overload's kernel: its entries (adjacent in a resolved policy) as rules, in order.
KernelSpec kernel_spec(std::span<const policy::ResolvedEntry> entries, const policy::ResolvedPolicy& resolved,
                       const Where& where) {
  const model::OperatorName& name = entries.front().schema->name();
  const std::string ns(name.namespace_or_aten());
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow((ns + "::" + name.name).c_str(), name.overload.c_str());
  KernelSpec spec{.handle = handle,
                  .ns = ns,
                  .unqualified = name.unqualified(),
                  .op = ns + "::" + name.unqualified(),
                  .device = device_type_of(resolved.device),
                  .key = dispatch_key_of(resolved.dispatch_key),
                  .args = {},
                  .rules = {},
                  .patterns = {}};
  for (const c10::Argument& argument : handle.schema().arguments()) spec.args.push_back(arg_kind(argument));
  for (const policy::ResolvedEntry& entry : entries)
    spec.rules.push_back(rule_spec(entry, resolved, handle, ns, where, spec.patterns));
  return spec;
}

// `fp32`, or `fp32 or lower_precision_fp by rule` for an overload with several rules.
std::string policies_of(const KernelSpec& spec) {
  std::string out;
  for (const RuleSpec& rule : spec.rules) {
    const std::string_view name = policy::spelling(rule.policy);
    if (out.find(name) == std::string::npos) out += (out.empty() ? "" : " or ") + std::string(name);
  }
  return spec.rules.size() > 1 ? out + " by rule" : out;
}

// Every runtime policy this process holds: the registration keeps the kernel installed.
// Note [replacing a runtime policy while it runs].
class Registry {
 public:
  static Registry& get() {
    static Registry* registry = new Registry();  // never destroyed: kernels may run during exit
    return *registry;
  }

  // Installs every spec, or replaces the policy of an op that has one, under one lock. Returns
  // one line per spec that replaced a kernel already on its key (Note [quiet by default]).
  std::vector<std::string> install(std::vector<KernelSpec> specs) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> replaced;
    for (KernelSpec& spec : specs) {
      if (spec.handle.hasKernelForDispatchKey(spec.key))
        replaced.push_back(c10::str("the runtime policy ", policies_of(spec), " for ", spec.op, " on ", spec.key,
                                    " replaces the kernel registered there before it"));
      install_locked(std::move(spec));
    }
    return replaced;
  }

  bool contains(const std::string& op, c10::DispatchKey key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return installed_.count({op, key}) != 0;
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    installed_.clear();  // the functors stay alive in kept_
    sections_.clear();
    owners_.clear();
  }

  // A loaded policy's `modules:` section replaces the one an earlier runtime policy gave the device.
  void install_sections(c10::DeviceType device, const std::string& owner, std::vector<modules::SectionRule> rules) {
    std::lock_guard<std::mutex> lock(mutex_);
    sections_.erase(device);
    auto table = std::make_unique<modules::Sections>(device, owner, rules, modules::Sections::OnConflict::raise);
    sections_[device] = InstalledSections{std::move(table), owner, std::move(rules)};
  }

  void note_owner(const std::string& owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    owners_.push_back(owner);
  }
  // Who loaded the runtime policies in force, in order (a file's path, load_policy's name=, or
  // register_runtime_policy).
  std::vector<std::string> owners() {
    std::lock_guard<std::mutex> lock(mutex_);
    return owners_;
  }

  // Note [a policy for one export]
  // autocastgen.export(..., policy=P) bakes P into a program without leaving it loaded: the
  // runtime policies in force are pushed, P is loaded over them (as load_policy would, so the
  // program is what eager gives after load_policy(P)), and popping puts back exactly what was
  // pushed: each op's spec as it was (an op P added loses its registration, one P replaced gets
  // its old spec back), the sections, the owners and the trace key's part, whose change drops
  // compiled graphs as every policy change does. Kernels stay alive as ever (Note [replacing a
  // runtime policy while it runs]). Pushes nest.
  void push() {
    std::lock_guard<std::mutex> lock(mutex_);
    Saved saved;
    for (const auto& [id, installed] : installed_) saved.specs.emplace(id, SavedSpec{installed.kernel->current(), installed.patterns});
    for (const auto& [device, installed] : sections_) saved.sections.emplace(device, SavedSections{installed.owner, installed.rules});
    saved.owners = owners_;
    saved.digest = detail::runtime_policies_digest();
    pushed_.push_back(std::move(saved));
  }

  void pop() {
    uint64_t digest = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TORCH_CHECK(!pushed_.empty(), "autocastgen: runtime_policies_pop without a push");
      Saved saved = std::move(pushed_.back());
      pushed_.pop_back();
      for (auto it = installed_.begin(); it != installed_.end();) {
        if (saved.specs.count(it->first) == 0) it = installed_.erase(it);  // its functor lives on in kept_
        else ++it;
      }
      for (auto& [id, spec] : saved.specs) {
        if (const auto it = installed_.find(id); it != installed_.end()) {
          it->second.patterns = std::move(spec.patterns);
          it->second.kernel->replace(std::move(spec.spec));
        } else {
          install_locked(spec.spec, std::move(spec.patterns));
        }
      }
      sections_.clear();
      for (auto& [device, section] : saved.sections) {
        auto table = std::make_unique<modules::Sections>(device, section.owner, section.rules, modules::Sections::OnConflict::raise);
        sections_[device] = InstalledSections{std::move(table), section.owner, std::move(section.rules)};
      }
      owners_ = std::move(saved.owners);
      digest = saved.digest;
    }
    detail::restore_runtime_policies_digest(digest);
  }

 private:
  using Id = std::pair<std::string, c10::DispatchKey>;
  struct Installed {
    std::unique_ptr<::torch::Library> library;
    RuntimePolicyKernel* kernel;  // owned by the dispatcher and by kept_
    std::vector<std::shared_ptr<const modules::Patterns>> patterns;  // its rules' `modules:`
  };

  struct InstalledSections {
    std::unique_ptr<modules::Sections> table;
    std::string owner;
    std::vector<modules::SectionRule> rules;
  };
  struct SavedSpec {
    std::shared_ptr<const KernelSpec> spec;
    std::vector<std::shared_ptr<const modules::Patterns>> patterns;
  };
  struct SavedSections {
    std::string owner;
    std::vector<modules::SectionRule> rules;
  };
  struct Saved {
    std::map<Id, SavedSpec> specs;
    std::map<c10::DeviceType, SavedSections> sections;
    std::vector<std::string> owners;
    uint64_t digest = 0;
  };

  void install_locked(KernelSpec spec) {
    std::vector<std::shared_ptr<const modules::Patterns>> patterns = std::move(spec.patterns);
    install_locked(std::make_shared<const KernelSpec>(std::move(spec)), std::move(patterns));
  }

  void install_locked(std::shared_ptr<const KernelSpec> spec, std::vector<std::shared_ptr<const modules::Patterns>> patterns) {
    const Id id{spec->op, spec->key};
    if (const auto it = installed_.find(id); it != installed_.end()) {
      it->second.patterns = std::move(patterns);
      it->second.kernel->replace(std::move(spec));
      return;
    }
    auto library = std::make_unique<::torch::Library>(::torch::Library::IMPL, spec->ns, spec->key, __FILE__, __LINE__);
    const std::string unqualified = spec->unqualified;
    auto kernel = std::make_unique<RuntimePolicyKernel>(std::move(spec));
    RuntimePolicyKernel* raw = kernel.get();
    g_published.fetch_add(1, std::memory_order_release);
    library->impl(unqualified.c_str(), ::torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
    kept_.push_back(c10::intrusive_ptr<c10::OperatorKernel>::reclaim_copy(raw));
    installed_.emplace(id, Installed{std::move(library), raw, std::move(patterns)});
  }

  std::mutex mutex_;
  std::map<Id, Installed> installed_;
  std::vector<c10::intrusive_ptr<c10::OperatorKernel>> kept_;
  std::map<c10::DeviceType, InstalledSections> sections_;
  std::vector<std::string> owners_;
  std::vector<Saved> pushed_;
};

// True while AUTOCASTGEN_POLICY loads, as this library loads: nothing may call into Python then.
bool g_loading_environment_policy = false;

// Installs every entry of a resolved policy; all are looked up before the first is installed, so
// a failed lookup registers nothing. Returns the number installed.
size_t install(const policy::ResolvedPolicy& resolved, const Where& where, const std::string& owner) {
  std::vector<KernelSpec> specs;
  const std::vector<policy::ResolvedEntry>& entries = resolved.entries;
  for (size_t first = 0, last = 0; first < entries.size(); first = last) {
    while (last < entries.size() && entries[last].schema == entries[first].schema) ++last;
    specs.push_back(kernel_spec(std::span(entries).subspan(first, last - first), resolved, where));
  }
  // The section first: a different one a generated library holds for the device refuses the load.
  if (!resolved.sections.empty()) {
    const c10::DeviceType device = device_type_of(resolved.device);
    std::vector<modules::SectionRule> rules;
    for (const policy::ModuleSection& section : resolved.sections)
      rules.push_back({section.pattern,
                       section.kind == policy::SectionKind::fp32      ? modules::SectionKind::fp32
                       : section.kind == policy::SectionKind::off     ? modules::SectionKind::off
                       : section.kind == policy::SectionKind::fp8_on  ? modules::SectionKind::fp8_on
                       : section.kind == policy::SectionKind::fp8_off ? modules::SectionKind::fp8_off
                                                                      : modules::SectionKind::dtype,
                       section.kind == policy::SectionKind::dtype ? scalar_type_named(section.dtype) : at::ScalarType::Undefined,
                       where(section.location)});
    Registry::get().install_sections(device, owner, std::move(rules));
  }
  const size_t count = specs.size();
  const std::string key = specs.empty() ? std::string() : c10::str(specs.front().key);
  const std::vector<std::string> replaced = Registry::get().install(std::move(specs));
  Registry::get().note_owner(owner);
  detail::note_runtime_policy_installed(resolved.behaviour_str());
  // Note [quiet by default] in insight/log.h: said once per load, the ops on request.
  if (!replaced.empty()) {
    const bool to_python = !g_loading_environment_policy;
    insight_log::log(insight_log::Level::info,
                     c10::str(owner, ": ", replaced.size(), " of ", count, " runtime policies replace the kernels ",
                              "registered on ", key, " before them (PyTorch's, a generated library's or an earlier ",
                              "runtime policy's); AUTOCASTGEN_LOG=debug lists them"),
                     to_python);
    for (const std::string& line : replaced) insight_log::log(insight_log::Level::debug, line, to_python);
  }
  return count;
}

// `text` as terminal_text writes it (a NUL would cut the raised message; Note [text for
// terminals]), its line breaks kept: the raised message has a line per diagnostic.
std::string printable(std::string_view text) {
  std::string out;
  for (size_t start = 0; start <= text.size();) {
    const size_t newline = std::min(text.find('\n', start), text.size());
    out += terminal_text(text.substr(start, newline - start));
    if (newline < text.size()) out.push_back('\n');
    start = newline + 1;
  }
  return out;
}

// Diagnostics of a single call name no file: just `error: message`.
std::string without_location(const DiagnosticEngine& diags) {
  std::string text;
  for (const Diagnostic& d : diags.diagnostics())
    if (d.severity == Severity::error) text += "\nerror: " + printable(d.message);
  return text;
}

}  // namespace

namespace detail {

bool has_runtime_policy(const std::string& qualified, c10::DispatchKey key) { return Registry::get().contains(qualified, key); }

}  // namespace detail

void register_runtime_policy(std::string_view op, std::string_view policy, std::string_view device, std::string_view message,
                             std::string_view rule) {
  const std::string call = c10::str("autocastgen: register_runtime_policy('", printable(op), "', '", printable(policy), "', '",
                                    printable(device), "'",
                                    message.empty() ? "" : ", <message>", rule.empty() ? "" : c10::str(", rule=", printable(rule)),
                                    ") failed:");
  for (const std::string_view argument : {op, policy, device, message, rule})
    TORCH_CHECK(is_utf8(argument), call, "\nerror: an argument is not UTF-8 text");
  // The arguments are checked as the same fields of a policy file (same messages), in a buffer
  // of their own so that every diagnostic has a place; the messages print without it.
  SourceManager sources;
  std::ostringstream messages;
  DiagnosticEngine diags(sources, messages);
  const std::string text = c10::str(device, "\n", policy, "\n", op, "\n", message);
  const uint32_t file = sources.add_buffer("<register_runtime_policy>", text);
  const auto value = [&](std::string_view field, size_t offset) {
    return policy::Located{std::string(field), {file, static_cast<uint32_t>(offset)}, static_cast<uint32_t>(std::max<size_t>(field.size(), 1)),
                           /*verbatim=*/true};
  };
  policy::EntryValues values{value(device, 0), value(policy, device.size() + 1),
                             value(op, device.size() + policy.size() + 2),
                             message.empty() ? std::nullopt
                                             : std::optional(value(message, device.size() + policy.size() + op.size() + 3))};
  std::optional<YamlNode> rule_node;
  if (!rule.empty()) {
    rule_node = parse_yaml(sources, sources.add_buffer("<rule>", std::string(rule)), diags);
    TORCH_CHECK(rule_node && !diags.has_errors(), call, without_location(diags));
    values.rule = &*rule_node;
  }
  std::optional<policy::PolicyFile> parsed = policy::parse_policy_entry(file, values, diags);
  TORCH_CHECK(parsed && !diags.has_errors(), call, without_location(diags),
              policy == "banned" && message.empty() ? "\nnote: pass the message as the fourth argument" : "");
  const std::optional<policy::OpPattern> pattern = policy::parse_op_pattern(op);
  const std::string ns(pattern->namespace_or_aten());
  const RegisteredSchemas registered = registered_schemas({ns});
  if (!pattern->all_overloads) {
    const std::string qualified = pattern->qualified();
    const auto unreadable = registered.unreadable.find(qualified);
    TORCH_CHECK(unreadable == registered.unreadable.end(), call, "\nerror: cannot read the schema of '", qualified,
                "' (autocastgen reads the native_functions.yaml grammar): ", unreadable->second);
  }
  std::vector<policy::PolicyFile> chain;
  chain.push_back(std::move(*parsed));
  const std::optional<policy::ResolvedPolicy> resolved =
      policy::resolve_policy(chain, registered.schemas, diags, running_release());
  TORCH_CHECK(resolved && !diags.has_errors(), call, without_location(diags));
  (void)install(*resolved, [&](SourceLocation location) { return sources.location_text(location); },
                "register_runtime_policy");
}

namespace {

// Resolves a chain load_policy_chain read against the ops registered now and installs it; `where`
// writes a location for the places kept (module patterns), `owner` is who loaded it.
size_t install_chain(const std::optional<std::vector<policy::PolicyFile>>& chain, DiagnosticEngine& diags,
                     const std::ostringstream& messages, const std::string& context,
                     const Where& where, const std::string& owner) {
  TORCH_CHECK(chain && !diags.has_errors(), context, printable(messages.str()));
  const RegisteredSchemas registered = registered_schemas(/*namespaces=*/{});
  const std::optional<policy::ResolvedPolicy> resolved =
      policy::resolve_policy(*chain, registered.schemas, diags, running_release());
  TORCH_CHECK(resolved && !diags.has_errors(), context, printable(messages.str()));
  return install(*resolved, where, owner);
}

}  // namespace

size_t load_runtime_policy_file(const std::string& path, const std::string& name) {
  SourceManager sources;
  std::ostringstream messages;
  DiagnosticEngine diags(sources, messages);
  const std::string context = c10::str("autocastgen: the runtime policy ", printable(path), " has errors:\n");
  std::optional<std::vector<policy::PolicyFile>> chain = policy::load_policy_chain(path, sources, diags);
  const std::string shown = display_path(path) + ":";  // how location_text names this file
  const auto where = [&](SourceLocation location) {
    std::string text = sources.location_text(location);
    if (!name.empty() && text.compare(0, shown.size(), shown) == 0) text = name + text.substr(shown.size() - 1);
    return text;
  };
  return install_chain(chain, diags, messages, context, where, name.empty() ? display_path(path) : name);
}

size_t load_runtime_policy_text(const std::string& text, const std::string& name, const std::string& base) {
  TORCH_CHECK(!name.empty() && name.find('\n') == std::string::npos && is_utf8(name),
              "autocastgen: load_runtime_policy_text: the name must be one line of UTF-8 text, not empty");
  TORCH_CHECK(is_utf8(base), "autocastgen: load_runtime_policy_text: the base folder's path must be UTF-8 text");
  SourceManager sources;
  std::ostringstream messages;
  DiagnosticEngine diags(sources, messages);
  const std::string context = c10::str("autocastgen: the runtime policy ", printable(name), " has errors:\n");
  std::optional<std::vector<policy::PolicyFile>> chain =
      policy::load_policy_chain(policy::PolicyText{name, text, base}, sources, diags);
  const uint32_t own = chain ? chain->front().file : 0;
  const auto where = [&](SourceLocation location) {  // the text by its name as given; its bases as files are
    if (!location.valid() || location.file != own) return sources.location_text(location);
    const LineColumn at = sources.line_column(location);
    return c10::str(name, ":", at.line, ":", at.column);
  };
  return install_chain(chain, diags, messages, context, where, name);
}

namespace {

// A policy file's `autocast:` header as the resolver gives it, its `extends:` chain applied (each
// file's fields override its base's): the device, the lower-precision dtypes (the device's default
// first, then the other, when no file gives `lower_precision:`), and whether a file gives them. The
// advisor's base policy (python/autocastgen/advisor/_record.py): Python reads no YAML itself.
std::tuple<std::string, std::vector<std::string>, bool> policy_autocast_header(const std::string& path) {
  SourceManager sources;
  std::ostringstream messages;
  DiagnosticEngine diags(sources, messages);
  const std::string context = c10::str("autocastgen: the policy ", printable(path), " has errors:\n");
  const std::optional<std::vector<policy::PolicyFile>> chain = policy::load_policy_chain(path, sources, diags);
  TORCH_CHECK(chain && !diags.has_errors(), context, printable(messages.str()));
  const RegisteredSchemas registered = registered_schemas(/*namespaces=*/{});
  const std::optional<policy::ResolvedPolicy> resolved =
      policy::resolve_policy(*chain, registered.schemas, diags, running_release());
  TORCH_CHECK(resolved && !diags.has_errors(), context, printable(messages.str()));
  const bool given = std::any_of(chain->begin(), chain->end(),
                                 [](const policy::PolicyFile& file) { return file.lower_precision.has_value(); });
  return {resolved->device, resolved->lower_precision, given};
}

}  // namespace

void clear_runtime_policies() {
  Registry::get().clear();
  detail::note_runtime_policies_cleared();
}

void push_runtime_policies() { Registry::get().push(); }
void pop_runtime_policies() { Registry::get().pop(); }
std::vector<std::string> runtime_policy_owners() { return Registry::get().owners(); }

namespace {

// AUTOCASTGEN_POLICY=<file>: loaded when this library loads. A broken file stops the process with
// the diagnostics, as the CLI would: running without the policy the user asked for is worse.
const bool environment_policy_loaded = [] {
  const char* path = std::getenv("AUTOCASTGEN_POLICY");
  if (path == nullptr || *path == '\0') return false;
  try {
    g_loading_environment_policy = true;
    const size_t count = load_runtime_policy_file(path);
    g_loading_environment_policy = false;
    std::fprintf(stderr, "autocastgen: AUTOCASTGEN_POLICY=%s: %zu runtime policies registered\n", path, count);
  } catch (const c10::Error& error) {
    std::fprintf(stderr, "%s\n", error.what_without_backtrace());
    std::fflush(stderr);
    std::_Exit(1);
  } catch (const std::exception& error) {  // memory running out, say: never std::terminate's SIGABRT
    std::fprintf(stderr, "autocastgen: error: AUTOCASTGEN_POLICY=%s: %s\n", terminal_text(path).c_str(),
                 dynamic_cast<const std::bad_alloc*>(&error) != nullptr ? "out of memory" : error.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  return true;
}();

}  // namespace

}  // namespace autocastgen

// The Python face: torch.ops.autocastgen.register_runtime_policy(op, policy, device) and friends.
TORCH_LIBRARY_FRAGMENT(autocastgen, m) {
  using autocastgen::detail::bookkeeping;  // Note [bookkeeping ops]
  m.def("register_runtime_policy(str op, str policy, str device, str message=\"\", str rule=\"\") -> ()",
        bookkeeping([](const std::string& op, const std::string& policy, const std::string& device,
                                            const std::string& message, const std::string& rule) {
          autocastgen::register_runtime_policy(op, policy, device, message, rule);
        }));
  m.def("load_runtime_policy_file(str path, str name=\"\") -> int",
        bookkeeping([](const std::string& path, const std::string& name) {
          return static_cast<int64_t>(autocastgen::load_runtime_policy_file(path, name));
        }));
  m.def("load_runtime_policy_text(str text, str name, str base) -> int",
        bookkeeping([](const std::string& text, const std::string& name, const std::string& base) {
          return static_cast<int64_t>(autocastgen::load_runtime_policy_text(text, name, base));
        }));
  m.def("clear_runtime_policies() -> ()", bookkeeping([] { autocastgen::clear_runtime_policies(); }));
  m.def("policy_autocast_header(str path) -> (str, str[], bool)",
        bookkeeping([](const std::string& path) { return autocastgen::policy_autocast_header(path); }));
  // Note [a policy for one export].
  m.def("runtime_policies_push() -> ()", bookkeeping([] { autocastgen::push_runtime_policies(); }));
  m.def("runtime_policies_pop() -> ()", bookkeeping([] { autocastgen::pop_runtime_policies(); }));
  // What decides autocast's casts now: the trace key's digest of the policies (Note [policies in
  // the trace key]), who loaded the runtime policies, and the generated libraries' identities.
  m.def("policies_in_force() -> (str, str[], str[])", bookkeeping([] {
          return std::make_tuple(autocastgen::detail::policies_digest(), autocastgen::runtime_policy_owners(),
                                 autocastgen::detail::generated_library_identities());
        }));
}
