// The policy language: the six autocast policies, one parsed policy file, and a resolved policy.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/schema.h"
#include "model/torch_version.h"
#include "support/source_manager.h"

namespace autocastgen::policy {

// Note [policy semantics]: lower_precision_fp casts every eligible argument to the current
// lower-precision dtype; fp32 casts them to float32; fp32_set_opt_dtype fills an unset
// `ScalarType? dtype` with float32 when the first argument is eligible; fp32_append_dtype
// redispatches to the sibling overload taking a trailing `ScalarType dtype`; promote casts to the
// widest floating type among the arguments; banned raises with a message; fp8 runs a matrix
// multiply (linear, mm, addmm) in float8 with the policy's recipe, or as lower_precision_fp when
// the call's shapes or device cannot take it (docs/fp8.md).
enum class PolicyKind : uint8_t { lower_precision_fp, fp32, fp32_set_opt_dtype, fp32_append_dtype, promote, banned, fp8 };
inline constexpr std::array<PolicyKind, 7> kAllPolicies = {
    PolicyKind::lower_precision_fp, PolicyKind::fp32,    PolicyKind::fp32_set_opt_dtype, PolicyKind::fp32_append_dtype,
    PolicyKind::promote,            PolicyKind::banned, PolicyKind::fp8};

[[nodiscard]] std::string_view spelling(PolicyKind policy);
[[nodiscard]] std::optional<PolicyKind> parse_policy_kind(std::string_view text);

// The ops the fp8 policy implements (their default overloads): what an fp8 list may name.
inline constexpr std::array<std::string_view, 3> kFp8Ops = {"linear", "mm", "addmm"};
// The devices whose PyTorch has _scaled_mm, the GEMM fp8 runs on.
inline constexpr std::array<std::string_view, 2> kFp8Devices = {"cpu", "cuda"};

// A located scalar as written in a policy file.
struct Located {
  std::string text;
  SourceLocation location;
  uint32_t length = 1;
  bool verbatim = false;  // `location` is where `text` stands in the source, byte for byte
};

// Note [release gates]: an entry may name the PyTorch releases it applies to with `since:`
// (inclusive) and `until:` (exclusive), both major.minor. Resolution targets one release; an entry
// whose gate excludes it is skipped (and reported as skipped), never looked up in the schemas, so
// one policy file can list ops that exist in some releases only.
struct ReleaseGate {
  std::optional<model::TorchVersion> since;  // first release the entry applies to
  std::optional<model::TorchVersion> until;  // first release it no longer applies to
  std::optional<Located> since_text;
  std::optional<Located> until_text;

  [[nodiscard]] bool empty() const { return !since && !until; }
  [[nodiscard]] bool admits(const model::TorchVersion& release) const {
    return (!since || release >= *since) && (!until || release < *until);
  }
  // `since 2.5`, `until 2.13`, `since 2.5, until 2.13`; empty when ungated.
  [[nodiscard]] std::string str() const;
};

// Note [fp8 recipe]: `autocast: fp8: {...}`, how the fp8 list scales and which formats it uses;
// the runtime's autocastgen::fp8::Recipe spelled as the policy language writes it. Values are
// checked when the file is read; a derived file's recipe replaces its base's.
struct Fp8Recipe {
  std::string scaling = "current";        // current | delayed
  std::string granularity = "tensorwise";  // tensorwise | rowwise | rowwise_with_gw_hp
  std::string forward = "float8_e4m3fn";   // float8_e4m3fn
  std::string backward = "float8_e5m2";    // float8_e5m2 | float8_e4m3fn (rowwise*: float8_e4m3fn, the default there)
  int64_t amax_history_len = 16;           // delayed scaling: amaxes kept per weight
  int64_t margin = 0;                      // scale = fp8_max / amax / 2^margin
  std::string select = "all";              // all | auto | measured: which GEMMs run in fp8
  SourceLocation location;                 // the `fp8:` key

  // `{scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2,
  // margin: 0}` (amax_history_len after backward for delayed scaling, `, select: X` last when not
  // all): the runtime's Recipe::str().
  [[nodiscard]] std::string str() const;
  bool operator==(const Fp8Recipe& other) const {
    return scaling == other.scaling && granularity == other.granularity && forward == other.forward &&
           backward == other.backward && amax_history_len == other.amax_history_len && margin == other.margin &&
           select == other.select;
  }
};

// Note [precision rules]: an entry may narrow when it applies and how it casts
// (docs/policy-language.md, "Precision rules"):
// - `dtypes: [...]`: only while the lower-precision dtype is one of these;
// - `when: {arg: value-or-list}`: only when every named argument equals (one of) its values;
//   `unless: {...}`: only when none does. Arguments are the op's non-Tensor ones, values literals
//   of their types, numbers compared by value;
// - `args: {name: lower_precision | fp32 | keep}`: what named Tensor arguments become, the others
//   following the entry's list (lower_precision_fp, fp32 and promote only).
// One overload may have several entries when no call could match two of them; a call that
// matches none runs untouched (falls through). An entry without these keys is what it always
// was: a rule for every call, generated as the same one-line wrapper.
enum class ArgCast : uint8_t { lower_precision, fp32, keep };
inline constexpr std::array<ArgCast, 3> kAllArgCasts = {ArgCast::lower_precision, ArgCast::fp32, ArgCast::keep};
[[nodiscard]] std::string_view spelling(ArgCast cast);
[[nodiscard]] std::optional<ArgCast> parse_arg_cast(std::string_view text);

// `when:` or `unless:` of one argument as written: a scalar, `null`, or a sequence of them.
struct WrittenCondition {
  Located arg;
  std::vector<std::optional<Located>> values;  // nullopt: `null`
  SourceLocation null_location;                // where the first `null` stands, when one does
};

// `args:` of one argument as written.
struct WrittenArgCast {
  Located arg;
  ArgCast cast;
  Located cast_text;
};

// One list entry as written: `op`, or a mapping with `op:` and `redispatch:` / `message:` /
// `since:` / `until:` / `dtypes:` / `when:` / `unless:` / `args:`.
struct PolicyEntry {
  PolicyKind policy;
  Located op;  // `[ns::]name`, `[ns::]name.overload` or `[ns::]name.*`
  std::optional<Located> redispatch;
  std::optional<Located> message;
  ReleaseGate gate;
  std::optional<std::vector<Located>> dtypes;  // Note [precision rules]
  std::vector<WrittenCondition> when;
  std::vector<WrittenCondition> unless;
  std::vector<WrittenArgCast> args;
  std::optional<std::vector<Located>> modules;  // Note [precision by place]
};

// One item of the `modules:` section as written (Note [precision by place]): `pattern: value`.
struct WrittenSection {
  Located pattern;
  Located value;  // fp32, off or a dtype name
};

// One `remove:` item: `op`, or `{op: ..., since: ..., until: ...}`.
struct RemoveEntry {
  Located op;
  ReleaseGate gate;
};

// One policy file, parsed but not resolved (no schema lookups yet).
struct PolicyFile {
  uint32_t file = 0;
  std::optional<Located> device;
  std::optional<Located> dispatch_key;
  std::optional<std::vector<Located>> lower_precision;
  std::optional<Fp8Recipe> fp8;
  std::optional<Located> extends;
  std::vector<RemoveEntry> remove;
  std::vector<PolicyEntry> entries;  // in file order
  std::vector<WrittenSection> sections;  // `modules:`, in file order (Note [precision by place])
};

// The dtype names a ScalarType condition compares with: torch's names, c10::ScalarType's
// enumerator and its value.
struct DtypeName {
  std::string_view name;
  std::string_view c10;
  int64_t code;
};
[[nodiscard]] std::span<const DtypeName> dtype_names();

// A value a condition compares an argument with, read for the argument's type.
struct RuleValue {
  enum class Kind : uint8_t { none, boolean, integer, real, text, dtype };
  Kind kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;      // text: the string; dtype: its name (float16)
  std::string spelling;  // how the policy language writes it back: null, true, 2, 2.5, .inf, none, 'tanh'

  // Numbers compare by value (2 == 2.0); NaN equals NaN (a condition on `.nan` matches NaN).
  friend bool operator==(const RuleValue& a, const RuleValue& b);
};

// `when:` / `unless:` of one argument, checked against the schema.
struct ArgCondition {
  std::string arg;
  size_t index = 0;  // the argument's position in the schema
  std::vector<RuleValue> values;
  // By name and values: the position follows from the schema.
  friend bool operator==(const ArgCondition& a, const ArgCondition& b) { return a.arg == b.arg && a.values == b.values; }
};

struct ArgCastRule {
  std::string arg;
  size_t index = 0;
  ArgCast cast = ArgCast::keep;
  friend bool operator==(const ArgCastRule& a, const ArgCastRule& b) { return a.arg == b.arg && a.cast == b.cast; }
};

// An entry's precision rule (Note [precision rules]); empty for a plain entry.
struct Rule {
  std::vector<std::string> dtypes;  // empty: every lower-precision dtype
  std::vector<std::string> modules;  // Note [precision by place]; empty: everywhere
  std::vector<ArgCondition> when;    // every one must match
  std::vector<ArgCondition> unless;  // none may match
  std::vector<ArgCastRule> args;

  [[nodiscard]] bool empty() const {
    return dtypes.empty() && modules.empty() && when.empty() && unless.empty() && args.empty();
  }
  // Whether the entry applies to some calls only.
  [[nodiscard]] bool conditional() const {
    return !dtypes.empty() || !modules.empty() || !when.empty() || !unless.empty();
  }
  // The keys as a flow mapping, `{dtypes: [float16], unless: {reduction: none}}`; "" when empty.
  [[nodiscard]] std::string str() const;
  // Only the condition keys (dtypes, modules, when, unless), or only `args:`, in the same form.
  [[nodiscard]] std::string condition_str() const;
  [[nodiscard]] std::string args_str() const;
  friend bool operator==(const Rule& a, const Rule& b) {
    return a.dtypes == b.dtypes && a.modules == b.modules && a.when == b.when && a.unless == b.unless &&
           a.args == b.args;
  }
};

// Could one call match both rules? False only when their dtypes are disjoint or one argument's
// conditions exclude each other (Note [precision rules]), or when one is scoped to modules and the
// other is not (the scoped one wins inside its modules; Note [precision by place]). The patterns
// of two scoped rules are not compared: two of them overlap as their other conditions do.
[[nodiscard]] bool rules_overlap(const Rule& a, const Rule& b);

// Note [precision by place]: rules scoped to modules (docs/policy-language.md, "Precision by
// place"). A pattern is a glob (`*`: any characters) over module paths as named_modules() spells
// them; it matches a call inside the module or any module it encloses.
// - an entry's `modules: [...]` is a condition beside dtypes/when/unless: the entry applies only
//   inside a matching module. Such entries come before the overload's other entries, so inside a
//   matching module they win and elsewhere the others apply;
// - the `modules:` section maps patterns to what autocast does inside: `fp32` (off; the module's
//   floating inputs cast to float32), `off` (off; inputs untouched), or a dtype of
//   `lower_precision:` (the lower-precision dtype inside). The innermost matching module decides;
//   inside fp32/off no list entry applies. The runtime's autocastgen/runtime/modules.h does it.
// - Note [fp8 by place]: a section value `{fp8: off}` / `{fp8: on}` says whether the fp8 list's
//   GEMMs run in fp8 inside (docs/fp8.md, "fp8 by place"). It is its own dimension: the innermost
//   module that an fp8 value matches decides fp8, whatever precision value decides the rest, and an
//   fp8 entry runs in fp8 only where its own conditions (its `modules:` included) hold and no
//   `{fp8: off}` is in force; elsewhere inside its conditions it runs as lower_precision_fp.
enum class SectionKind : uint8_t { fp32, off, dtype, fp8_on, fp8_off };
struct ModuleSection {
  std::string pattern;
  SectionKind kind = SectionKind::fp32;
  std::string dtype;        // kind == dtype: float16, bfloat16
  SourceLocation location;  // of the pattern
  uint32_t length = 1;
  // `fp32`, `off`, the dtype, `{fp8: on}` or `{fp8: off}`, as the policy language writes it.
  [[nodiscard]] std::string value() const;
  // The runtime's enumerator (autocastgen::modules::SectionKind): fp32, off, dtype, fp8_on, fp8_off.
  [[nodiscard]] std::string_view kind_name() const;
  [[nodiscard]] bool is_fp8() const { return kind == SectionKind::fp8_on || kind == SectionKind::fp8_off; }
  friend bool operator==(const ModuleSection& a, const ModuleSection& b) {
    return a.pattern == b.pattern && a.kind == b.kind && a.dtype == b.dtype;
  }
};
// A section value as the language writes it: fp32, off, float16, bfloat16, `{fp8: on}` or
// `{fp8: off}` (exactly so spelled; whether the dtype is one of the policy's is the resolver's
// check); nullopt for anything else.
[[nodiscard]] std::optional<ModuleSection> parse_section_value(std::string_view value);
// A pattern as the policy language writes it in flow context: plain when it reads back as the same
// string (`lm_head`, `layers.*.attn`), double-quoted otherwise (`"*.attn"`).
[[nodiscard]] std::string pattern_spelling(std::string_view pattern);
// The sections as a flow mapping, `{lm_head: fp32, "*.attn": off}`; "{}" when there are none.
[[nodiscard]] std::string sections_str(const std::vector<ModuleSection>& sections);

// One overload's entry of a resolved policy.
struct ResolvedEntry {
  // The overload. Null only for entries read back from a manifest or C++ registrations whose op
  // the schemas at hand do not have (another PyTorch release): then `op` alone names it.
  const model::FunctionSchema* schema = nullptr;
  std::string op;  // the overload as policies name it (OperatorName::display)
  PolicyKind policy = PolicyKind::fp32;
  const model::FunctionSchema* redispatch = nullptr;  // fp32_append_dtype: the overload it calls, when known
  std::string redispatch_op;                          // its name ("" for other policies)
  std::string message;                                // banned only
  Rule rule;                                          // Note [precision rules]
  std::vector<SourceLocation> module_locations;       // of each of rule.modules, where known
  SourceLocation location;                            // where the input lists the op
  uint32_t length = 1;                                // of the listed name, for carets
};

// An entry left out of the resolution for the target release (Note [release gates]).
struct SkippedEntry {
  std::string op;                    // as written
  std::optional<PolicyKind> policy;  // nullopt: a `remove:` item
  ReleaseGate gate;
  std::string reason;                // e.g. `since 2.5` or `not in PyTorch 2.3 (exists in 2.4-2.15)`
  SourceLocation location;
};

// What a resolved policy was read from: every verb works on the same model, whatever the input.
enum class PolicySource : uint8_t { policy_file, manifest, cpp };
[[nodiscard]] std::string_view spelling(PolicySource source);  // "policy", "manifest", "C++"

// A policy after `extends`, `remove` and name expansion, checked against the schemas; or a
// manifest or C++ registrations read back (audit).
struct ResolvedPolicy {
  PolicySource source = PolicySource::policy_file;
  std::string name;                                  // the input as reports print it
  std::optional<model::TorchVersion> torch_version;  // the release the policy was resolved for
  std::string device;
  std::string dispatch_key;
  std::vector<std::string> lower_precision;  // the first is the default; empty when C++ does not say
  std::optional<Fp8Recipe> fp8;              // `autocast: fp8:`, when the policy (or a base) gives one
  std::vector<uint32_t> files;               // the requested file first, then what it extends
  std::vector<ResolvedEntry> entries;        // inherited entries first, each file in its own order
  std::vector<ModuleSection> sections;       // Note [precision by place]: the derived file's first
  std::vector<SkippedEntry> skipped;         // gated out for torch_version, in resolution order

  [[nodiscard]] size_t count(PolicyKind policy) const;  // entries of that policy
  // Distinct overloads: fewer than entries when precision rules give one several.
  [[nodiscard]] size_t overload_count() const;
  // What the policy makes autocast do, as text: equal for equal behaviour, whatever file, comments
  // or order of keys it was read from. It names the policies compiled graphs were traced with
  // (Note [policies in the trace key] in the runtime's state/traced.cpp).
  [[nodiscard]] std::string behaviour_str() const;
  // The policies reports count: the six, and fp8 when the policy has an fp8 list or recipe.
  [[nodiscard]] std::vector<PolicyKind> reported_kinds() const;
  // The first entry of an overload (by ResolvedEntry::op); an overload with precision rules may
  // have several, adjacent to each other.
  [[nodiscard]] const ResolvedEntry* find(std::string_view op) const;
};

// Known devices (c10 device type names, lower case) and the autocast dispatch key of each.
struct DeviceInfo {
  std::string_view device;
  std::string_view dispatch_key;
  std::string_view default_dtype;  // PyTorch's default lower-precision dtype for the device
};
[[nodiscard]] const std::vector<DeviceInfo>& autocast_devices();

}  // namespace autocastgen::policy
