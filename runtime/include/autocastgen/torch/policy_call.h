// What an autocast policy does at a call, written once: generated wrappers call these per-policy
// drivers (one line each), and the boxed runtime-policy kernel calls the same drivers through a
// boxed argument adapter (runtime/torch/policies/boxed_args.h). Kept light (no ATen/ATen.h) so generated
// files compile fast.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/List.h>
#include <c10/core/Scalar.h>
#include <c10/core/SymInt.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/macros/Export.h>

#include "autocastgen/fp8/recipe.h"
#include "autocastgen/runtime/cast_cache.h"
#include "autocastgen/runtime/modules.h"
#include "autocastgen/runtime/state.h"
#include "autocastgen/runtime/stats.h"
#include "autocastgen/runtime/switches.h"
#include "autocastgen/runtime/watch.h"

namespace torch {
class Library;
}

// Exported by libtorch_cpu and declared in ATen/autocast_mode.h; declared again here (same
// signatures) so generated files can call them inline without including that heavy header.
namespace at::autocast {
TORCH_API at::ScalarType get_autocast_dtype(at::DeviceType device_type);
TORCH_API at::Tensor cached_cast(at::ScalarType to_type, const at::Tensor& arg, c10::DeviceType device_type);
TORCH_API bool is_autocast_cache_enabled();
}  // namespace at::autocast

namespace autocastgen::torch {

// Precision by place (autocastgen/runtime/modules.h): what generated files register.
using ModulePatterns = ::autocastgen::modules::Patterns;
using ModuleSections = ::autocastgen::modules::Sections;
using ::autocastgen::modules::SectionKind;

// Note [promote semantics]: the widest floating type among the eligible Tensor and Tensor[]
// arguments, starting from the lower-precision dtype; float64 is ignored and mixing float16 with
// bfloat16 is an error. As in PyTorch, optional tensors do not take part (they are still cast).
// One step of it: `current` widened by `tensor`. TorchState's is PyTorch's own (its error text
// included); OwnState's reads autocastgen's lower-precision dtype. Call::promote decides the
// common steps inline and calls these only for a float16/bfloat16 mix, so that each raises its error.
TORCH_API at::ScalarType torch_promote_type(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device);
TORCH_API at::ScalarType own_promote_type(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device);

// Note [two states]: whose autocast state a wrapper follows is a type, chosen when the wrapper is
// generated (`generate --state`, `add_autocast_ops(STATE ...)`) or, for a runtime policy, per call.
// - TorchState: PyTorch's at::autocast (torch.autocast turns it on; PyTorch's cast cache). The
//   autocast key is included only while it is on, so a wrapper that runs is on.
// - OwnState: autocastgen's thread-local state (AutocastScope; autocastgen's cast cache). The key
//   is also included while torch.autocast is on, so a wrapper checks that autocastgen's state is.
struct TorchState {
  static constexpr std::string_view name = "torch";
  static bool on(c10::DeviceType) { return true; }
  static at::ScalarType lower_precision(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
  static at::Tensor cast(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device) {
    return at::autocast::cached_cast(to, tensor, device);
  }
  static at::Tensor cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                 stats::OpCounters& counters) {
    return stats::torch_cast_counted(to, tensor, device, counters);
  }
  static at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
    return torch_promote_type(current, tensor, device);
  }
  static bool cache_enabled(c10::DeviceType) { return at::autocast::is_autocast_cache_enabled(); }
};

struct OwnState {
  static constexpr std::string_view name = "autocastgen";
  static bool on(c10::DeviceType device) { return ::autocastgen::is_autocast_enabled(device); }
  static at::ScalarType lower_precision(c10::DeviceType device) { return ::autocastgen::autocast_dtype(device); }
  static at::Tensor cast(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device) {
    return ::autocastgen::cached_cast(to, tensor, device);
  }
  static at::Tensor cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                 stats::OpCounters& counters) {
    return stats::own_cast_counted(to, tensor, device, counters);
  }
  static at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
    return own_promote_type(current, tensor, device);
  }
  static bool cache_enabled(c10::DeviceType device) { return ::autocastgen::is_autocast_cache_enabled(device); }
};

// Which generated wrapper or runtime-policy kernel ran last on this thread, and how many have run:
// lets tests prove that our kernels (not PyTorch's built-in ones) handled a call.
struct WrapperTrace {
  const char* last_op = nullptr;
  uint64_t calls = 0;
  // The current call is part of a backward that torch.compile traces inside the forward's autocast
  // scope, which eager's backward never enters: it runs untouched (Note [the backward a trace puts
  // in the forward's scope] in runtime/torch/state/traced.cpp).
  bool untouched = false;
};
TORCH_API WrapperTrace& wrapper_trace();

// Where a call comes from: its policy's device and autocast key, and the op as
// `ns::name[.overload]` (a string that outlives the call).
struct Site {
  c10::DeviceType device;
  c10::DispatchKey key;
  const char* op;
};

// Note [eligible argument]: defined, floating point, on the policy's device, not float64.
TORCH_API bool is_eligible(const at::Tensor& tensor, c10::DeviceType device);


// banned: raises c10::Error with the policy's message exactly as written (PyTorch's own banned
// kernels raise their message alone, and code matches on it).
[[noreturn]] TORCH_API void raise_banned(const char* op, std::string_view message);

namespace detail {
template <typename Tensors, typename CastOne>
std::vector<at::Tensor> cast_each(const Tensors& tensors, const CastOne& cast_one) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(cast_one(t));
  return out;
}
}  // namespace detail

// What the watch and the range record see of an argument (Call::run_observed): its tensors, and
// after a call that returns nothing, the results it left (none, but for a runtime policy's stack).
// Found at instantiation, like the per-argument steps: boxed_args.h overloads both.
template <typename T>
void add_observed(stats::Tensors& tensors, const T& arg) {
  tensors.add(arg);
}
template <typename T>
void add_observed_results(stats::Tensors&, const T&) {}

// Calls the op: a function (at::_ops::<op>::call) or a typed dispatcher handle (custom namespaces).
template <typename Op, typename... Args>
decltype(auto) invoke(const Op& op, Args&&... args) {
  if constexpr (std::is_invocable_v<const Op&, Args&&...>) return op(std::forward<Args>(args)...);
  else return op.call(std::forward<Args>(args)...);
}

// One autocast call: excludes the autocast key for its whole life (so the inner call reaches the
// backend), traces the call, and gives the drivers below the state's reads and casts.
//
// Note [counting in the drivers]: statistics (autocastgen/runtime/stats.h) are counted here and
// nowhere else. While they are off, a call costs one relaxed load and a branch in on(), and a null
// check per cast; while they are on, on() fetches this thread's counters for (op, policy), every
// cast goes through State::cast_counted, and the destructor records the dtype the op ran in. The
// per-call fields are mutable because the drivers hold the Call const and the steps take it by
// const reference; they are bookkeeping, not the call's behaviour.
//
// Note [observing in the drivers]: the non-finite watch, the range record and record-only mode
// (autocastgen/runtime/watch.h) live here too, on the same switch word as the statistics (Note
// [one switch word] in switches.h): every driver calls the op through run(), which, when on() saw
// the watch or the range record on, gathers the call's tensor arguments and results
// (add_observed) and hands them to stats::observe_inputs/observe_outputs; otherwise it is a branch
// on a member and the call. In record-only mode on() answers false, so the driver takes its
// untouched path, still through run().
template <typename State>
class Call {
 public:
  using state_type = State;

  Call(const Site& site, stats::Policy policy) : site_(site), policy_(policy), exclude_(site.key) {
    WrapperTrace& trace = wrapper_trace();
    trace.last_op = site.op;
    ++trace.calls;
    untouched_ = trace.untouched;
  }
  ~Call() {
    if (C10_UNLIKELY(counters_ != nullptr)) finish_counting();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  [[nodiscard]] const Site& site() const { return site_; }
  // Whether the state is on and autocast should act; when the state is on and statistics, the
  // watch or the range record are, the call is counted (and observed). False in record-only mode
  // and inside a module whose `modules:` section is fp32 or off (Note [sections in the drivers]).
  [[nodiscard]] bool on() const {
    if (C10_UNLIKELY(untouched_) || !State::on(site_.device)) return false;
    if (const uint32_t active = stats::detail::active(); C10_UNLIKELY(active != 0)) return on_switched(active);
    return true;
  }
  // Calls the op (invoke), observing its tensors while the watch or the range record is on. The
  // observed path stays out of line so that the wrapper's own code is what it was without it.
  template <typename Op, typename... Args>
  C10_ALWAYS_INLINE decltype(auto) run(const Op& op, Args&&... args) const {
    if (C10_LIKELY(!observe_)) return invoke(op, std::forward<Args>(args)...);
    return run_observed(op, args...);
  }
  [[nodiscard]] at::ScalarType lower_precision() const {
    if (C10_UNLIKELY(section_dtype_ != at::ScalarType::Undefined)) return section_dtype_;
    return State::lower_precision(site_.device);
  }
  [[nodiscard]] bool eligible(const at::Tensor& tensor) const {
    if (C10_UNLIKELY(counters_ != nullptr)) note_input(tensor);
    return is_eligible(tensor, site_.device);
  }
  [[nodiscard]] at::Tensor cast(const at::Tensor& tensor, at::ScalarType to) const {
    if (C10_UNLIKELY(counters_ != nullptr)) return counted_cast(tensor, to);
    return State::cast(to, tensor, site_.device);
  }
  // One step of Note [promote semantics]. `current` starts at the lower-precision dtype and can
  // only widen to float32, so the common outcomes are decided here; a float16/bfloat16 mix goes to
  // the state's promote, which raises its own error (PyTorch's text for TorchState). Inline, since
  // it runs once per tensor: a cat of two tensors runs about 70 instructions fewer than through
  // the out-of-line step (bench/wrapper_instructions.py).
  [[nodiscard]] at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor) const {
    if (!is_eligible(tensor, site_.device)) return current;
    const at::ScalarType next = tensor.scalar_type();
    if (next == at::kDouble) return current;
    if (current == at::kFloat || next == at::kFloat) return at::kFloat;
    if (next == current) return current;
    return State::promote(current, tensor, site_.device);
  }
  [[noreturn]] void raise_banned(std::string_view message) const {
    ran_nowhere_ = true;
    ::autocastgen::torch::raise_banned(site_.op, message);
  }
  // The dtype the casting drivers cast eligible arguments to (ran_in when there was one).
  void target(at::ScalarType to) const { target_ = to; }
  // The dtype the op was told to compute in (fp32_set_opt_dtype, fp32_append_dtype).
  void ran_in(at::ScalarType dtype) const { ran_in_ = dtype; }
  [[nodiscard]] bool cache_enabled() const { return State::cache_enabled(site_.device); }
  // An fp8 GEMM that ran in the lower precision instead, and why (counted when counting).
  void fp8_skipped(const char* reason) const {
    if (C10_UNLIKELY(counters_ != nullptr) && reason != nullptr) stats::count_fp8_skipped(*counters_, reason);
  }

 private:
  // Note [sections in the drivers]: the switch word's kModules bit says a policy's `modules:`
  // section is loaded; then the section in force for this thread's innermost module decides:
  // fp32 and off leave the call untouched (still counted and observed, as in record-only mode),
  // a dtype replaces the lower-precision dtype. Out of line: nothing of it is in a wrapper's code.
  C10_NOINLINE bool on_switched(uint32_t active) const {
    bool act = true;
    if ((active & stats::detail::kModules) != 0) {
      const ::autocastgen::modules::Section section = ::autocastgen::modules::current_section(site_.device);
      using ::autocastgen::modules::SectionKind;
      if (section.kind == SectionKind::fp32 || section.kind == SectionKind::off) act = false;
      else if (section.kind == SectionKind::dtype) section_dtype_ = section.dtype;
    }
    if ((active & stats::detail::kInsight) != 0) {
      act = begin_counting(active) && act;
      // An untouched call still reports its input dtypes (run_observed notes them).
      if (!act) observe_ = true;
    }
    return act;
  }
  bool begin_counting(uint32_t active) const {
    counters_ = stats::thread_counters(site_.op, policy_);
    ++counters_->calls;
    active_ = active;
    observe_ = (active & (stats::detail::kWatch | stats::detail::kRanges)) != 0;
    return (active & stats::detail::kRecordOnly) == 0;
  }
  template <typename Op, typename... Args>
  C10_NOINLINE decltype(auto) run_observed(const Op& op, const Args&... args) const {
    stats::Tensors inputs;
    (add_observed(inputs, args), ...);
    if ((active_ & (stats::detail::kWatch | stats::detail::kRanges)) == 0) {  // counted, left untouched by a section
      for (const at::Tensor& tensor : inputs.tensors()) note_input(tensor);
      return invoke(op, args...);
    }
    const at::ScalarType first = stats::observe_inputs(*counters_, active_, inputs);
    if (first_input_ == at::ScalarType::Undefined) first_input_ = first;
    using Result = decltype(invoke(op, args...));
    stats::Tensors outputs;
    if constexpr (std::is_void_v<Result>) {
      invoke(op, args...);
      (add_observed_results(outputs, args), ...);  // a runtime policy's results, on the stack
      stats::observe_outputs(site_.op, policy_, ran_dtype(), *counters_, active_, inputs, outputs);
    } else {
      Result result = invoke(op, args...);
      outputs.add(result);
      stats::observe_outputs(site_.op, policy_, ran_dtype(), *counters_, active_, inputs, outputs);
      return result;
    }
  }
  at::ScalarType ran_dtype() const {
    if (ran_in_ != at::ScalarType::Undefined) return ran_in_;
    return eligible_seen_ ? target_ : first_input_;
  }
  void note_input(const at::Tensor& tensor) const {
    if (!tensor.defined()) return;
    const at::ScalarType dtype = tensor.scalar_type();
    counters_->input_dtypes[static_cast<size_t>(dtype)] = true;
    if (first_input_ == at::ScalarType::Undefined) first_input_ = dtype;
  }
  at::Tensor counted_cast(const at::Tensor& tensor, at::ScalarType to) const {
    note_input(tensor);
    if (is_eligible(tensor, site_.device)) eligible_seen_ = true;
    return State::cast_counted(to, tensor, site_.device, *counters_);
  }
  void finish_counting() const {
    if (ran_nowhere_) return;
    const at::ScalarType ran = ran_dtype();
    const size_t slot = ran == at::ScalarType::Undefined ? stats::kNoDtype : static_cast<size_t>(ran);
    ++counters_->ran_in[slot];
  }

  const Site& site_;
  stats::Policy policy_;
  c10::impl::ExcludeDispatchKeyGuard exclude_;
  mutable stats::OpCounters* counters_ = nullptr;
  mutable at::ScalarType target_ = at::ScalarType::Undefined;
  mutable at::ScalarType ran_in_ = at::ScalarType::Undefined;
  mutable at::ScalarType first_input_ = at::ScalarType::Undefined;
  mutable at::ScalarType section_dtype_ = at::ScalarType::Undefined;
  mutable bool eligible_seen_ = false;
  mutable bool ran_nowhere_ = false;
  mutable bool observe_ = false;
  mutable uint32_t active_ = 0;
  bool untouched_ = false;
};

// fp32_set_opt_dtype's `ScalarType? dtype` argument, marked in the wrapper's call so the driver
// knows which argument to fill.
struct OptDtypeArg {
  const std::optional<at::ScalarType>& value;
};
inline OptDtypeArg opt_dtype(const std::optional<at::ScalarType>& value) { return {value}; }

// ---- Per-argument steps, overloaded by argument type (found at instantiation; boxed_args.h adds
// the boxed ones). Arguments that are not tensors pass through every step unchanged.

template <typename T>
const T& plain_arg(const T& value) {
  return value;
}
inline const std::optional<at::ScalarType>& plain_arg(const OptDtypeArg& dtype) { return dtype.value; }

template <typename S, typename T>
const T& cast_arg(const Call<S>&, const T& value, at::ScalarType) {
  return value;
}
template <typename S>
at::Tensor cast_arg(const Call<S>& call, const at::Tensor& tensor, at::ScalarType to) {
  return call.cast(tensor, to);
}
template <typename S>
std::optional<at::Tensor> cast_arg(const Call<S>& call, const std::optional<at::Tensor>& tensor, at::ScalarType to) {
  if (!tensor.has_value()) return std::nullopt;
  return call.cast(*tensor, to);
}
template <typename S>
std::vector<at::Tensor> cast_arg(const Call<S>& call, at::TensorList tensors, at::ScalarType to) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return call.cast(t, to); });
}
template <typename S>
std::vector<at::Tensor> cast_arg(const Call<S>& call, const at::ITensorListRef& tensors, at::ScalarType to) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return call.cast(t, to); });
}
template <typename S>
c10::List<std::optional<at::Tensor>> cast_arg(const Call<S>& call, const c10::List<std::optional<at::Tensor>>& tensors,
                                              at::ScalarType to) {
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(tensors.size());
  for (const std::optional<at::Tensor>& t : tensors) out.push_back(cast_arg(call, t, to));
  return out;
}

// Note [promote semantics]: Tensor and Tensor[] arguments take part, optional ones do not.
template <typename S, typename T>
at::ScalarType promote_arg(const Call<S>&, at::ScalarType current, const T&) {
  return current;
}
template <typename S>
at::ScalarType promote_arg(const Call<S>& call, at::ScalarType current, const at::Tensor& tensor) {
  return call.promote(current, tensor);
}
template <typename S>
at::ScalarType promote_arg(const Call<S>& call, at::ScalarType current, at::TensorList tensors) {
  for (const at::Tensor& t : tensors) current = call.promote(current, t);
  return current;
}
template <typename S>
at::ScalarType promote_arg(const Call<S>& call, at::ScalarType current, const at::ITensorListRef& tensors) {
  for (const at::Tensor& t : tensors) current = call.promote(current, t);
  return current;
}

// fp32_set_opt_dtype: the marked dtype becomes float32 when unset and the first argument is
// eligible; other arguments pass unchanged.
template <typename S, typename T>
const T& fill_dtype_arg(const Call<S>&, const T& value, bool) {
  return value;
}
template <typename S>
std::optional<at::ScalarType> fill_dtype_arg(const Call<S>& call, const OptDtypeArg& dtype, bool first_eligible) {
  const std::optional<at::ScalarType> filled =
      dtype.value.has_value() || !first_eligible ? dtype.value : std::optional<at::ScalarType>(at::kFloat);
  if (filled) call.ran_in(*filled);
  return filled;
}

// Whether the first argument is an eligible tensor (fp32_set_opt_dtype, fp32_append_dtype).
template <typename S, typename T>
bool first_eligible(const Call<S>&, const T&) {
  return false;
}
template <typename S>
bool first_eligible(const Call<S>& call, const at::Tensor& tensor) {
  return call.eligible(tensor);
}

// fp32_append_dtype: float32, or the first argument's own dtype when it is a tensor autocast
// leaves alone.
template <typename S, typename T>
at::ScalarType appended_dtype(const Call<S>&, const T&) {
  return at::kFloat;
}
template <typename S>
at::ScalarType appended_dtype(const Call<S>& call, const at::Tensor& first) {
  return call.eligible(first) ? at::kFloat : first.scalar_type();
}

template <typename First, typename... Rest>
const First& first_of(const First& first, const Rest&...) {
  return first;
}

// ---- The six cast policies (Note [policy semantics] in core/policy/policy.h; fp8 is above).
// Each starts a Call and, while the state is off, calls the op untouched.

// Every eligible argument cast to the lower-precision dtype.
template <typename State, typename Op, typename... Args>
decltype(auto) lower_precision_fp(const Site& site, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::lower_precision_fp);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  const at::ScalarType to = call.lower_precision();
  call.target(to);
  return call.run(op, cast_arg(call, args, to)...);
}

// Every eligible argument cast to float32.
template <typename State, typename Op, typename... Args>
decltype(auto) fp32(const Site& site, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::fp32);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  call.target(at::kFloat);
  return call.run(op, cast_arg(call, args, at::kFloat)...);
}

// Every eligible argument cast to the widest floating type among them.
template <typename State, typename Op, typename... Args>
decltype(auto) promote(const Site& site, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::promote);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  at::ScalarType to = call.lower_precision();
  ((to = promote_arg(call, to, args)), ...);
  call.target(to);
  return call.run(op, cast_arg(call, args, to)...);
}

// An unset `dtype` (marked with opt_dtype()) becomes float32 when the first argument is eligible;
// nothing is cast.
template <typename State, typename Op, typename... Args>
decltype(auto) fp32_set_opt_dtype(const Site& site, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::fp32_set_opt_dtype);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  const bool fill = first_eligible(call, first_of(args...));
  return call.run(op, fill_dtype_arg(call, args, fill)...);
}

// Redispatches to the sibling overload taking a trailing dtype: float32, or the first argument's
// own dtype when it is not eligible.
template <typename State, typename Op, typename Redispatch, typename... Args>
decltype(auto) fp32_append_dtype(const Site& site, const Op& op, const Redispatch& redispatch, const Args&... args) {
  const Call<State> call(site, stats::Policy::fp32_append_dtype);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  const at::ScalarType dtype = appended_dtype(call, first_of(args...));
  call.ran_in(dtype);
  return call.run(redispatch, plain_arg(args)..., dtype);
}

// Raises with the policy's message.
template <typename State, typename Op, typename... Args>
decltype(auto) banned(const Site& site, std::string_view message, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::banned);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  call.raise_banned(message);
}

// fp8 (docs/fp8.md): one GEMM of the fp8 list in float8 with the policy's recipe, its output in the
// lower-precision dtype, when the call can take it (autocastgen::fp8::fp8_*_support: shapes,
// device, dtypes); nullopt otherwise. Overloaded by the op's arguments: linear, mm, addmm.
struct Fp8Call {
  const Site& site;
  const ::autocastgen::fp8::Recipe& recipe;
  at::ScalarType out_dtype;
  bool cache_weights;
  // Set when the GEMM does not run in fp8: why (static text; the support rule's or the
  // selection's, Note [fp8 selection]), for the statistics' fp8_skipped.
  const char** skipped = nullptr;
};
TORCH_API std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& input, const at::Tensor& weight,
                                             const std::optional<at::Tensor>& bias);
TORCH_API std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat2);
TORCH_API std::optional<at::Tensor> fp8_gemm(const Fp8Call& call, const at::Tensor& self, const at::Tensor& mat1,
                                             const at::Tensor& mat2, const c10::Scalar& beta, const c10::Scalar& alpha);
// What the fp8 driver returns when the GEMM ran in fp8 (boxed_args.h puts it on the stack).
template <typename... Args>
at::Tensor fp8_result(at::Tensor out, const Args&...) {
  return out;
}

// Note [fp8 by place] (core/policy/policy.h): whether an fp8 call may run in fp8 where it is, by
// the `{fp8: on|off}` values of the policy's `modules:` section; the one decision by place. When
// not allowed, skip_reason() is `place <pattern>` (the pattern of the `{fp8: off}` in force). An
// fp8 entry's own `modules:` condition is not asked here: the wrapper tests it before the driver.
struct Fp8Here {
  bool allowed = true;
  const char* pattern = nullptr;  // the deciding section pattern, when one decides
  [[nodiscard]] std::string skip_reason() const { return allowed ? std::string() : std::string("place ") + pattern; }
};
inline Fp8Here fp8_allowed_here(c10::DeviceType device) {
  if (C10_LIKELY((stats::detail::active() & stats::detail::kModules) == 0)) return {};
  const ::autocastgen::modules::Fp8Place place = ::autocastgen::modules::fp8_place(device);
  return {place.allowed, place.pattern};
}

// The GEMM in fp8 when the call can take it and its place allows it; otherwise as
// lower_precision_fp (the same casts and op: bit for bit that driver's result).
template <typename State, typename Op, typename... Args>
decltype(auto) fp8(const Site& site, const ::autocastgen::fp8::Recipe& recipe, const Op& op, const Args&... args) {
  const Call<State> call(site, stats::Policy::fp8);
  if (!call.on()) return call.run(op, plain_arg(args)...);
  const at::ScalarType to = call.lower_precision();
  if (const Fp8Here here = fp8_allowed_here(site.device); !here.allowed) {
    call.fp8_skipped(here.skip_reason().c_str());
    call.target(to);
    return call.run(op, cast_arg(call, args, to)...);
  }
  const char* skipped = nullptr;
  if (std::optional<at::Tensor> out = fp8_gemm(Fp8Call{site, recipe, to, call.cache_enabled(), &skipped}, args...)) {
    call.ran_in(recipe.forward_dtype);
    // Through run() like the op itself, so the watch sees the fp8 GEMM's output.
    return call.run([&out](const auto&... a) { return fp8_result(std::move(*out), a...); }, args...);
  }
  call.fp8_skipped(skipped);
  call.target(to);
  return call.run(op, cast_arg(call, args, to)...);
}

// ---- Precision rules (Note [precision rules] in core/policy/policy.h): a wrapper with
// conditional entries reads the lower-precision dtype once, tests each entry's condition in order
// and calls that entry's driver; a call no entry matches falls through.

template <typename State>
at::ScalarType lower_precision(c10::DeviceType device) {
  if (C10_UNLIKELY((stats::detail::active() & stats::detail::kModules) != 0)) {
    const ::autocastgen::modules::Section section = ::autocastgen::modules::current_section(device);
    if (section.kind == ::autocastgen::modules::SectionKind::dtype) return section.dtype;
  }
  return State::lower_precision(device);
}


inline constexpr double kInfinity = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

namespace detail {
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

inline bool same_number(double value, double literal) {
  return value == literal || (std::isnan(value) && std::isnan(literal));
}

// One argument against one literal of a `when:`/`unless:` list; numbers compare by value, a
// symbolic SymInt matches no number (its value is unknown until it is guarded).
template <typename T, typename L>
bool matches(const T& value, const L& literal) {
  if constexpr (is_optional<T>::value) {
    if constexpr (std::is_same_v<L, std::nullopt_t>) return !value.has_value();
    else return value.has_value() && matches(*value, literal);
  } else if constexpr (std::is_same_v<L, std::nullopt_t>) {
    return false;
  } else if constexpr (std::is_same_v<T, c10::Scalar>) {
    if constexpr (std::is_same_v<L, bool>) return value.isBoolean() && value.toBool() == literal;
    else if (value.isFloatingPoint()) return same_number(value.toDouble(), literal);
    else if (value.isIntegral(/*includeBool=*/false)) return same_number(static_cast<double>(value.toLong()), literal);
    else return false;
  } else if constexpr (std::is_same_v<T, c10::SymInt>) {
    const std::optional<int64_t> known = value.maybe_as_int();
    return known.has_value() && *known == literal;
  } else if constexpr (std::is_same_v<L, std::string_view>) {
    return std::string_view(value.data(), value.size()) == literal;
  } else if constexpr (std::is_floating_point_v<T>) {
    return same_number(value, literal);
  } else {
    return value == literal;
  }
}
}  // namespace detail

// A text literal of a condition with its length: the bytes of a `when:` value may include NUL
// (Note [data in generated code] in the generator's emit/cpp_text.h).
template <size_t N>
constexpr std::string_view text(const char (&literal)[N]) {
  return std::string_view(literal, N - 1);
}

// Whether `value` equals one of `literals` (the generated condition of a `when:` or `unless:`).
template <typename T, typename... Literals>
bool is_one_of(const T& value, const Literals&... literals) {
  return (detail::matches(value, literals) || ...);
}

// An argument an entry's `args:` names: not cast, cast to float32, or to the lower-precision dtype,
// whatever the entry's list does with the others.
template <typename T>
struct KeepArg {
  const T& value;
};
template <typename T>
struct Fp32Arg {
  const T& value;
};
template <typename T>
struct LowerPrecisionArg {
  const T& value;
};
template <typename T>
KeepArg<T> keep(const T& value) {
  return {value};
}
template <typename T>
Fp32Arg<T> to_fp32(const T& value) {
  return {value};
}
template <typename T>
LowerPrecisionArg<T> to_lower_precision(const T& value) {
  return {value};
}

template <typename T>
const T& plain_arg(const KeepArg<T>& arg) {
  return arg.value;
}
template <typename T>
const T& plain_arg(const Fp32Arg<T>& arg) {
  return arg.value;
}
template <typename T>
const T& plain_arg(const LowerPrecisionArg<T>& arg) {
  return arg.value;
}
template <typename S, typename T>
const T& cast_arg(const Call<S>&, const KeepArg<T>& arg, at::ScalarType) {
  return arg.value;
}
template <typename S, typename T>
decltype(auto) cast_arg(const Call<S>& call, const Fp32Arg<T>& arg, at::ScalarType) {
  return cast_arg(call, arg.value, at::kFloat);
}
template <typename S, typename T>
decltype(auto) cast_arg(const Call<S>& call, const LowerPrecisionArg<T>& arg, at::ScalarType) {
  return cast_arg(call, arg.value, call.lower_precision());
}
// A named argument has its own target: it takes no part in promote's widest type.
template <typename S, typename T>
at::ScalarType promote_arg(const Call<S>&, at::ScalarType current, const KeepArg<T>&) {
  return current;
}
template <typename S, typename T>
at::ScalarType promote_arg(const Call<S>&, at::ScalarType current, const Fp32Arg<T>&) {
  return current;
}
template <typename S, typename T>
at::ScalarType promote_arg(const Call<S>&, at::ScalarType current, const LowerPrecisionArg<T>&) {
  return current;
}

// A call that matches none of its overload's entries: the op runs untouched, below autocast.
template <typename State, typename Op, typename... Args>
decltype(auto) fall_through(const Site& site, const Op& op, const Args&... args) {
  WrapperTrace& trace = wrapper_trace();
  trace.last_op = site.op;
  ++trace.calls;
  const c10::impl::ExcludeDispatchKeyGuard exclude(site.key);
  return invoke(op, args...);
}

// ---- Registration helpers of generated files.

// Registers a fallthrough fallback for `key` unless one exists already (PyTorch owns the
// fallback of most autocast keys); the registration lives as long as this object.
class TORCH_API FallthroughRegistration {
 public:
  explicit FallthroughRegistration(c10::DispatchKey key);
  ~FallthroughRegistration();
  FallthroughRegistration(const FallthroughRegistration&) = delete;
  FallthroughRegistration& operator=(const FallthroughRegistration&) = delete;
  [[nodiscard]] bool registered() const { return library_ != nullptr; }

 private:
  std::unique_ptr<::torch::Library> library_;
};

// Names a generated library in the key that compiled graphs are looked up by (Note [policies in
// the trace key] in the runtime's state/traced.cpp): a graph traced while another set of policies
// was in force is not reused while this one is loaded. `identity` is a digest of what the library
// was generated from; the note stays for the process.
class TORCH_API GeneratedLibraryNote {
 public:
  explicit GeneratedLibraryNote(const char* identity);
};

// Note [claiming the key]: a library generated with OwnState owns its dispatch key. Kernels that
// others (PyTorch) registered there for ops the policy leaves out would cast by PyTorch's state
// whenever an AutocastScope includes the key; they are replaced by fallthroughs, so unlisted ops
// run untouched. Ops given a runtime policy are left alone. A TorchState library claims nothing:
// PyTorch's kernels for other ops follow the same state as its wrappers.
class TORCH_API DispatchKeyClaim {
 public:
  DispatchKeyClaim(c10::DispatchKey key, std::initializer_list<std::string_view> listed_ops);
  ~DispatchKeyClaim();
  DispatchKeyClaim(const DispatchKeyClaim&) = delete;
  DispatchKeyClaim& operator=(const DispatchKeyClaim&) = delete;

 private:
  std::vector<std::unique_ptr<::torch::Library>> libraries_;  // one per namespace
};

}  // namespace autocastgen::torch
