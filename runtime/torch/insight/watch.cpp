// The non-finite watch and the range record (watch.h): measuring a driver call's tensors, and the
// non-finite event with the user's Python line.
#include "autocastgen/runtime/watch.h"

#include "autocastgen/runtime/modules.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "rank.h"
#include "state/state_internal.h"
#include "watch_internal.h"

namespace autocastgen::stats {

namespace {

// Note [range record] in watch.h: the limits it counts against.
constexpr double kFloat16Max = 65504.0;
constexpr double kFloat16Tiny = 5.9604644775390625e-08;  // 2^-24, the smallest positive subnormal
constexpr double kBFloat16Max = 3.3895313892515355e+38;  // (2 - 2^-7) * 2^127
constexpr double kBFloat16Tiny = 9.183549615799121e-41;  // 2^-133

// Tensors the watch can reduce: real values on a device (not meta, not a Python or functorch
// wrapper, whose item() is not a number), dense, non-empty, of a dtype aminmax takes.
bool measurable(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0 || t.layout() != at::kStrided || t.is_meta()) return false;
  const at::ScalarType dtype = t.scalar_type();
  if (dtype != at::kHalf && dtype != at::kBFloat16 && dtype != at::kFloat && dtype != at::kDouble) return false;
  const c10::DispatchKeySet wrappers({c10::DispatchKey::Python, c10::DispatchKey::FuncTorchBatched,
                                      c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::Functionalize});
  return !t.key_set().has_any(wrappers);
}

// min and max of `t` in one reduction (NaN propagates into both), read with one copy to the host.
std::array<double, 2> min_max(const at::Tensor& t) {
  const auto [lo, hi] = at::aminmax(t);
  const at::Tensor both = at::stack({lo.to(at::kDouble), hi.to(at::kDouble)}).cpu();
  const double* values = both.const_data_ptr<double>();
  return {values[0], values[1]};
}

// Note [range record]: |x| with NaN and Inf set to zero (left out), in float32 for the 16-bit types
// (their comparisons against 65504 must not round the limit), then every figure in one host copy.
void measure_range(const at::Tensor& t, ValueRange& range, Ranges* outputs) {
  at::Tensor a = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t;
  a = at::nan_to_num(at::abs(a), 0.0, 0.0, 0.0);
  const at::Tensor nonzero = a > 0;
  std::vector<at::Tensor> figures = {a.max(), at::where(nonzero, a, std::numeric_limits<double>::infinity()).min()};
  if (outputs != nullptr) {
    figures.push_back((a > kFloat16Max).sum());
    figures.push_back((nonzero & (a < kFloat16Tiny)).sum());
    figures.push_back((a > kBFloat16Max).sum());
    figures.push_back((nonzero & (a < kBFloat16Tiny)).sum());
  }
  for (at::Tensor& f : figures) f = f.to(at::kDouble);
  const at::Tensor host = at::stack(figures).cpu();
  const double* v = host.const_data_ptr<double>();
  range.max_abs = std::max(range.max_abs, v[0]);
  range.min_abs = std::min(range.min_abs, v[1]);
  ++range.tensors;
  if (outputs != nullptr) {
    outputs->output_elements += static_cast<uint64_t>(t.numel());
    outputs->float16_overflow += static_cast<uint64_t>(v[2]);
    outputs->float16_underflow += static_cast<uint64_t>(v[3]);
    outputs->bfloat16_overflow += static_cast<uint64_t>(v[4]);
    outputs->bfloat16_underflow += static_cast<uint64_t>(v[5]);
  }
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string describe(const at::Tensor& t) {
  std::string text = detail::dtype_name(t.scalar_type()) + " [";
  for (size_t i = 0; i < t.sizes().size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(t.sizes()[i]);
  return text + "]";
}

// The events' shared state: the first event and the ops that warned.
struct Events {
  std::mutex mutex;
  std::string first;
  std::set<std::string> warned;
};

Events& events() {
  static Events* const state = new Events;  // leaked: used by threads during shutdown
  return *state;
}

// Note [the user's line]: the autocastgen Python package defines the op
// autocastgen::watch_user_line() -> str in Python (insight.py): called here, on the thread that
// runs the wrapped op, it walks that thread's Python frames (the ones that called into the op are
// still there) and returns the file:line of the first outside torch and autocastgen. The
// dispatcher's Python kernel takes the GIL. Without the package (torch.ops.load_library alone), or
// from C++, there is no such op or no Python frame, and the report has no line. (PyTorch's
// CapturedTraceback could gather the frames from C++ too, but its symbolizer imports torch._dynamo
// on first use: seconds.)
thread_local const std::string* t_traced_line = nullptr;

std::string user_line() {
  if (t_traced_line != nullptr) return *t_traced_line;  // a compiled call: its line when traced
  try {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({"autocastgen::watch_user_line", ""});
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) return {};
    return op->typed<std::string()>().call();
  } catch (const std::exception&) {
    return {};  // no line rather than no report
  }
}

thread_local int64_t t_traced_module = -1;  // a compiled call's module path id, recorded when traced

// The attached module the call ran in (autocastgen/runtime/modules.h); nullopt outside every one.
std::optional<std::string> running_module() {
  if (t_traced_module >= 0)
    return t_traced_module == 0 ? std::nullopt : std::optional(modules::path_of(static_cast<uint32_t>(t_traced_module)));
  const std::string* path = modules::current_path();
  return path == nullptr ? std::nullopt : std::optional(*path);
}

// Note [non-finite watch] in watch.h: one event per call (its first non-finite output).
void report(const char* op, Policy policy, at::ScalarType ran_in, const Tensors& inputs, size_t index,
            const at::Tensor& output, const std::array<double, 2>& bounds) {
  const FiniteMode mode = finite_mode();
  if (mode == FiniteMode::off) return;
  Events& state = events();
  std::unique_lock<std::mutex> lock(state.mutex);
  const bool first = state.first.empty();
  const bool warn = mode == FiniteMode::warn && state.warned.insert(op).second;
  lock.unlock();  // the user's line takes the GIL: never while holding our lock
  // Note [events in the file] in stats_table.h: each row keeps its first event too.
  const uint32_t module = t_traced_module >= 0 ? static_cast<uint32_t>(t_traced_module) : modules::current_path_id();
  const bool row_first = detail::wants_event(op, policy, module);
  if (!first && !warn && !row_first && mode != FiniteMode::raise) return;

  const bool nan = std::isnan(bounds[0]) || std::isnan(bounds[1]);
  const std::string rank = detail::rank_from_env();  // which rank of a distributed job saw it
  std::string message = "autocastgen: non-finite output" + (rank.empty() ? std::string() : " on rank " + rank) +
                        ": " + std::string(op) + " (rule " + policy_name(policy) +
                        ", ran in " + detail::dtype_name(ran_in) + ") returned " +
                        (nan ? "NaN" : bounds[1] == std::numeric_limits<double>::infinity() ? "inf" : "-inf") +
                        " in output " + std::to_string(index) + " (" + describe(output) + "); inputs:";
  if (inputs.tensors().empty()) message += " none";
  for (size_t i = 0; i < inputs.tensors().size(); ++i) {
    const at::Tensor& input = inputs.tensors()[i];
    message += (i == 0 ? " " : ", ") + describe(input);
    if (measurable(input)) {
      const std::array<double, 2> in = min_max(input);
      message += " max |x| " + number(std::isnan(in[0]) || std::isnan(in[1]) ? std::nan("")
                                                                               : std::max(std::fabs(in[0]), std::fabs(in[1])));
    }
  }
  if (const std::optional<std::string> module = running_module()) message += "; in module '" + *module + "'";
  const std::string line = user_line();
  if (!line.empty()) message += "; called from " + line;
  if (row_first) detail::record_event(op, policy, module, message, line);

  lock.lock();
  if (state.first.empty()) state.first = message;
  lock.unlock();
  if (warn) TORCH_WARN(message);
  if (mode == FiniteMode::raise) TORCH_CHECK(false, message);
}

}  // namespace

void detail::set_traced_line(const std::string* line) { t_traced_line = line; }
void detail::set_traced_module(int64_t module) { t_traced_module = module; }

void detail::reset_watch_events() {
  Events& state = events();
  const std::lock_guard<std::mutex> lock(state.mutex);
  state.first.clear();
  state.warned.clear();
}

std::string first_nonfinite() {
  Events& state = events();
  const std::lock_guard<std::mutex> lock(state.mutex);
  return state.first;
}

at::ScalarType observe_inputs(OpCounters& counters, uint32_t active, const Tensors& inputs) {
  at::ScalarType first = at::ScalarType::Undefined;
  if ((active & detail::kRecordOnly) != 0) {
    for (const at::Tensor& t : inputs.tensors()) {
      counters.input_dtypes[static_cast<size_t>(t.scalar_type())] = true;
      if (first == at::ScalarType::Undefined) first = t.scalar_type();
    }
  }
  if ((active & detail::kRanges) != 0) {
    const at::NoGradGuard no_grad;
    for (const at::Tensor& t : inputs.tensors()) {
      if (!measurable(t)) continue;
      try {
        measure_range(t, counters.ranges.inputs, nullptr);
      } catch (const c10::Error&) {
        // A tensor the reductions cannot take is left out; the op itself must still run.
      }
    }
  }
  return first;
}

void observe_outputs(const char* op, Policy policy, at::ScalarType ran_in, OpCounters& counters,
                     uint32_t active, const Tensors& inputs, const Tensors& outputs) {
  if (C10_UNLIKELY(::autocastgen::detail::compiling_call()))
    return detail::observe_traced_call(op, policy, ran_in, inputs, outputs);
  const bool ranges = (active & detail::kRanges) != 0;
  if (ranges) ++counters.ranges.calls;
  std::optional<size_t> bad;
  std::array<double, 2> bad_bounds{};
  {
    const at::NoGradGuard no_grad;
    for (size_t i = 0; i < outputs.tensors().size(); ++i) {
      const at::Tensor& t = outputs.tensors()[i];
      if (!measurable(t)) continue;
      try {
        const std::array<double, 2> bounds = min_max(t);
        ++counters.outputs_checked;
        if (std::isfinite(bounds[0]) && std::isfinite(bounds[1])) {
          counters.output_max_abs = std::max({counters.output_max_abs, std::fabs(bounds[0]), std::fabs(bounds[1])});
        } else {
          ++counters.nonfinite;
          if (!bad) {
            bad = i;
            bad_bounds = bounds;
          }
        }
        if (ranges) measure_range(t, counters.ranges.outputs, &counters.ranges);
      } catch (const c10::Error&) {
        // As for inputs: not measured.
      }
    }
  }
  if (bad && (active & detail::kWatch) != 0)
    report(op, policy, ran_in, inputs, *bad, outputs.tensors()[*bad], bad_bounds);
}

}  // namespace autocastgen::stats
