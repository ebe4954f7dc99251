// Per-op autocast statistics (docs/insight.md): what the per-policy drivers count, the switch that
// turns counting on, the C++ scope, and the process-wide table with its JSON form.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>
#include <c10/macros/Macros.h>

#include "autocastgen/runtime/switches.h"

namespace autocastgen::stats {

// The rule a driver applied (Note [policy semantics] in core/policy/policy.h).
enum class Policy : uint8_t { lower_precision_fp, fp32, promote, fp32_set_opt_dtype, fp32_append_dtype, banned, fp8 };
TORCH_API const char* policy_name(Policy policy);

// One slot per dtype (c10::ScalarType), plus one for "none" (no tensor input).
inline constexpr size_t kDtypeSlots = static_cast<size_t>(c10::ScalarType::NumOptions) + 1;
inline constexpr size_t kNoDtype = kDtypeSlots - 1;

// Note [what the statistics count]
// Per op overload and rule, for the calls in which autocast was on (a wrapper of an OwnState
// library whose state is off calls the op untouched and counts nothing):
// - calls: driver calls;
// - ran_in[dtype]: the dtype the op's eligible (floating, on the device, not float64) inputs were
//   cast to, whether or not a conversion was needed; when the op had no eligible input, the dtype
//   of its first tensor input; for fp32_set_opt_dtype and fp32_append_dtype the dtype the op was
//   told to compute in (float32 when autocast filled it in); for fp8 the forward fp8 dtype when the
//   GEMM ran in fp8, else (shapes or device fp8 cannot take) the lower-precision dtype. banned
//   calls raise and run in nothing. In record-only mode, the dtype of the first tensor input;
// - input_dtypes: bit set of the dtypes of every tensor argument seen;
// - casts: tensors converted by this call; a cast taken from a cast cache is a cache hit, not a cast;
// - cast_bytes: numel × element size of the tensors those casts created;
// - cache_hits: casts served from a cast cache (PyTorch's for TorchState, autocastgen's for
//   OwnState; Note [telling a hit from a cast] in runtime/torch/insight/stats.cpp);
// - cache_misses: casts of a cacheable tensor (a weight) that were not in the cache: converted and
//   stored (each is also a cast);
// - cache_evictions: entries of autocastgen's cast cache dropped during the call's casts (a dead
//   source found by the lookup, or swept when the cache grew). PyTorch's cache drops nothing
//   during a call (it is cleared when the outermost torch.autocast ends): 0 for TorchState.
// The non-finite watch and the range record (watch.h) add, per op:
// - outputs_checked, nonfinite: floating tensor outputs examined, and those holding a NaN or Inf;
// - output_max_abs: the largest |value| of the examined outputs that were all finite;
// - ranges (range record only): Note [range record] in watch.h.
// fp8 calls that ran in the lower precision also count why (fp8_skipped: reason -> calls): the
// support rule's reason or the recipe's selection's (Note [fp8 selection]).
struct ValueRange {
  double max_abs = 0;                                     // largest finite |x|
  double min_abs = std::numeric_limits<double>::infinity();  // smallest finite non-zero |x|
  uint64_t tensors = 0;                                   // floating tensors measured

  void add(const ValueRange& other);
};

struct Ranges {
  uint64_t calls = 0;  // calls measured
  ValueRange inputs;
  ValueRange outputs;
  uint64_t output_elements = 0;  // elements of the measured outputs
  uint64_t float16_overflow = 0;
  uint64_t float16_underflow = 0;
  uint64_t bfloat16_overflow = 0;
  uint64_t bfloat16_underflow = 0;

  void add(const Ranges& other);
};

struct OpCounters {
  uint64_t calls = 0;
  uint64_t casts = 0;
  uint64_t cast_bytes = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t cache_evictions = 0;
  uint64_t outputs_checked = 0;
  uint64_t nonfinite = 0;
  double output_max_abs = 0;
  Ranges ranges;
  std::array<uint64_t, kDtypeSlots> ran_in{};
  std::array<bool, kDtypeSlots> input_dtypes{};
  std::vector<std::pair<std::string, uint64_t>> fp8_skipped;  // few reasons: a list, not a map

  void add(const OpCounters& other);
};

// One more fp8 call of the row that ran in the lower precision because of `reason`.
TORCH_API void count_fp8_skipped(OpCounters& counters, const char* reason);

// The states' casts while statistics are on (TorchState::cast_counted, OwnState::cast_counted in
// policy_call.h): the same result as the state's cast, and the cast or cache hit counted in
// `counters` (Note [telling a hit from a cast] in runtime/torch/insight/stats.cpp). PyTorch's
// cast cache, and autocastgen's (autocastgen/runtime/cast_cache.h).
TORCH_API at::Tensor torch_cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                        OpCounters& counters);
TORCH_API at::Tensor own_cast_counted(at::ScalarType to, const at::Tensor& tensor, c10::DeviceType device,
                                      OpCounters& counters);

// Whether statistics are on (AUTOCASTGEN_STATS or an enable()).
inline bool enabled() { return C10_UNLIKELY((detail::active() & detail::kCounting) != 0); }

// This thread's counters of (op, policy), created on first use. `op` is `ns::name[.overload]`; it
// need only live for the call. Never null; valid until this thread ends.
TORCH_API OpCounters* thread_counters(const char* op, Policy policy);

// Counting on or off for the whole process; enable/disable nest (a disable without its enable is
// ignored). AUTOCASTGEN_STATS keeps counting on for the life of the process.
TORCH_API void enable();
TORCH_API void disable();

// Adds this thread's counts to the process-wide table and zeroes them. Runs when a StatsScope
// ends, when a thread ends, and in snapshot_json/flush; other threads' counts reach the table only
// then (the drivers never lock).
TORCH_API void merge_thread();

// The process-wide table (after merging this thread) as `{"version": 1, "ops": [...]}`, ops sorted
// by calls (descending), then op, then policy.
[[nodiscard]] TORCH_API std::string snapshot_json();

// Drops every count: the table, this thread's, and (lazily, on their next call or merge) other
// threads' unmerged counts.
TORCH_API void reset();

// Writes snapshot_json() to `path` (empty: the AUTOCASTGEN_STATS file), through a temporary file
// renamed into place. A failure warns (TORCH_WARN) and returns false; it never throws.
TORCH_API bool flush(const std::string& path = "");

// The AUTOCASTGEN_STATS file, empty when the variable is unset.
[[nodiscard]] TORCH_API const std::string& env_path();

// Counts while it lives (on every thread), and merges the constructing thread's counts into the
// table when it ends. Not copyable; end it on the thread that made it.
class TORCH_API StatsScope {
 public:
  StatsScope();
  ~StatsScope();
  StatsScope(const StatsScope&) = delete;
  StatsScope& operator=(const StatsScope&) = delete;
};

}  // namespace autocastgen::stats
