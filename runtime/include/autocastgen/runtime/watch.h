// The non-finite watch, the range record and record-only mode (docs/insight.md): their switches,
// C++ scopes, and what the per-policy drivers call when one is on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/macros/Export.h>

#include "autocastgen/runtime/stats.h"

namespace autocastgen::stats {

// Note [non-finite watch]: while on, every floating tensor output of a driver call (generated
// wrappers of both states and runtime policies) is reduced once (aminmax: one pass, and on CUDA
// one device synchronisation per output). An output holding a NaN or Inf is counted in the op's
// `nonfinite`; the first one in the process is kept (first_nonfinite()) with the op, overload,
// rule, the input dtypes and their largest |value| (measured after the op ran: an in-place op has
// changed its input by then), and, when the op was called from Python with the autocastgen package
// imported, the file:line of the first Python frame outside torch and autocastgen (Note [the
// user's line] in runtime/torch/insight/watch.cpp). Modes:
// - record: count and keep the first event, say nothing;
// - warn: also a warning (c10 TORCH_WARN: a Python UserWarning when called from Python), once
//   per op overload for the life of the process (reset() forgets which ops warned);
// - raise: raise c10::Error (RuntimeError in Python) with the same text, at the first event
//   (the op has run; its outputs are dropped with the exception).
enum class FiniteMode : uint8_t { off, record, warn, raise };
TORCH_API const char* finite_mode_name(FiniteMode mode);
// "off", "record", "warn" or "raise"; nullopt for anything else.
[[nodiscard]] TORCH_API std::optional<FiniteMode> parse_finite_mode(std::string_view text);

// The process-wide mode (AUTOCASTGEN_FINITE sets it at load); returns the previous one.
TORCH_API FiniteMode set_finite_mode(FiniteMode mode);
[[nodiscard]] TORCH_API FiniteMode finite_mode();

// The first non-finite event since the last reset(), as its message; empty when there was none.
[[nodiscard]] TORCH_API std::string first_nonfinite();

// The watch in `mode` while it lives; the previous mode comes back when it ends.
class TORCH_API FiniteWatch {
 public:
  explicit FiniteWatch(FiniteMode mode);
  ~FiniteWatch();
  FiniteWatch(const FiniteWatch&) = delete;
  FiniteWatch& operator=(const FiniteWatch&) = delete;

 private:
  FiniteMode previous_;
};

// Note [range record]: while on, per op overload and rule (the `ranges` object of its entry):
// the largest and the smallest non-zero |value| of its floating tensor inputs (as the op got
// them, measured before it ran) and outputs, NaN and Inf left out (they are the watch's); the
// number of output elements; and how many of those lie outside float16's and bfloat16's range:
// overflow, |x| > the largest finite value (65504; 3.3895e38), and underflow, 0 < |x| < the
// smallest positive subnormal (2^-24 ≈ 5.96e-8; 2^-133 ≈ 9.18e-41), which rounds to zero or to
// that subnormal. Several reductions and a float32 copy of float16/bfloat16 tensors per tensor:
// a diagnostic mode, not one for production runs. Outputs are also checked as by the watch
// (nonfinite, output_max_abs), whether or not the watch is on.
// Range record on while any enable is in force (nests, process-wide).
TORCH_API void enable_ranges();
TORCH_API void disable_ranges();

// Note [record-only mode]: the drivers cast nothing — an op under torch.autocast or an
// AutocastScope runs as if autocast were off (in its inputs' dtypes; no dtype filled in, no fp8
// GEMM, banned ops run) — and the range record and statistics are on. Run a float32 model once
// inside its usual autocast scope and read which ops would leave float16's range. Only calls that
// reach autocastgen's wrappers or runtime policies are affected: PyTorch's own autocast kernels
// for ops autocastgen does not wrap still cast. Nests, process-wide; AUTOCASTGEN_RECORD=FILE.json
// turns it on for the process and writes the table to FILE.json at exit.
TORCH_API void enable_record_only();
TORCH_API void disable_record_only();
// The AUTOCASTGEN_RECORD file, empty when the variable is unset.
[[nodiscard]] TORCH_API const std::string& record_path();

// The range record on while it lives (statistics and outputs as described above).
class TORCH_API RangeScope {
 public:
  RangeScope();
  ~RangeScope();
  RangeScope(const RangeScope&) = delete;
  RangeScope& operator=(const RangeScope&) = delete;
};

// Record-only mode while it lives; merges the constructing thread's counts when it ends.
class TORCH_API RecordScope {
 public:
  RecordScope();
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;
};

// ---- What the drivers call while the watch or the range record is on (Call::run in
// policy_call.h). Not for users.

// The tensors of a call's arguments or results, gathered by type: Tensor, optional, lists,
// tuples; everything else is skipped. (A runtime policy's stack: the drivers' add_observed,
// which runtime/torch/policies/boxed_args.h overloads.)
class TORCH_API Tensors {
 public:
  void add(const at::Tensor& tensor) {
    if (tensor.defined()) tensors_.push_back(tensor);
  }
  void add(const std::optional<at::Tensor>& tensor) {
    if (tensor.has_value()) add(*tensor);
  }
  void add(at::TensorList tensors) {
    for (const at::Tensor& t : tensors) add(t);
  }
  void add(const std::vector<at::Tensor>& tensors) { add(at::TensorList(tensors)); }
  void add(const at::ITensorListRef& tensors) {
    for (const at::Tensor& t : tensors) add(t);
  }
  void add(const c10::List<std::optional<at::Tensor>>& tensors) {
    for (const std::optional<at::Tensor>& t : tensors) add(t);
  }
  template <typename... T>
  void add(const std::tuple<T...>& values) {
    std::apply([this](const auto&... value) { (add(value), ...); }, values);
  }
  template <typename T>
  void add(const T&) {}

  [[nodiscard]] const std::vector<at::Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<at::Tensor> tensors_;
};

// Before the op runs: the range record of `inputs`; in record-only mode their dtypes (input_dtypes,
// and the first one as ran_in). Returns that first dtype (Undefined when none).
TORCH_API at::ScalarType observe_inputs(OpCounters& counters, uint32_t active, const Tensors& inputs);
// After: the outputs checked (watch, ranges) and, at a NaN or Inf, the event (which may raise).
// `op` is `ns::name[.overload]`.
TORCH_API void observe_outputs(const char* op, Policy policy, at::ScalarType ran_in, OpCounters& counters,
                               uint32_t active, const Tensors& inputs, const Tensors& outputs);

}  // namespace autocastgen::stats
