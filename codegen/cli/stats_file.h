// Statistics files (AUTOCASTGEN_STATS, docs/insight.md) read and checked: the one reader of
// `autocastgen stats` and `autocastgen report`, every problem a located error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "support/diagnostics.h"
#include "support/source_manager.h"
#include "support/stats_names.h"  // kMaxStatsNameBytes, kMaxStatsKeyBytes: the bounds the runtime writes within

namespace autocastgen::cli {

// An op's `ranges` object (Note [range record] in runtime/include/autocastgen/runtime/watch.h).
struct RangeStats {
  uint64_t calls = 0;
  std::optional<double> input_max_abs;
  std::optional<double> input_min_abs;
  std::optional<double> output_max_abs;
  std::optional<double> output_min_abs;
  uint64_t output_elements = 0;
  uint64_t float16_overflow = 0;
  uint64_t float16_underflow = 0;
  uint64_t bfloat16_overflow = 0;
  uint64_t bfloat16_underflow = 0;

  void add(const RangeStats& other);
  bool operator==(const RangeStats&) const = default;
};

// One op overload under one rule, as the runtime wrote it (runtime/include/autocastgen/runtime/stats.h).
// Fields added after the first files (cache misses and evictions, the watch's, the ranges) are
// optional: a file without them reads as zero / not measured.
struct OpStats {
  std::string op;
  std::string policy;  // empty in files that do not say
  std::optional<std::string> module;  // the attached module the calls ran in (autocastgen.attach); the root is ""
  uint64_t calls = 0;
  std::map<std::string, uint64_t> ran_in;
  std::map<std::string, uint64_t> fp8_skipped;  // fp8 calls that ran in the lower precision, by reason
  uint64_t casts = 0;
  uint64_t cast_bytes = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t cache_evictions = 0;
  uint64_t compiled_calls = 0;  // of calls, those compiled graphs made: their cache use is not known
  uint64_t outputs_checked = 0;
  uint64_t nonfinite = 0;
  std::optional<double> output_max_abs;  // not measured: no finite output checked
  std::optional<RangeStats> ranges;

  void add(const OpStats& other);

  // Outside every module sorts first (a module's path can be "": the root).
  [[nodiscard]] std::tuple<std::string, std::string, bool, std::string> key() const {
    return {op, policy, module.has_value(), module.value_or("")};
  }
  bool operator==(const OpStats&) const = default;
};

// Reads the statistics file at `path`; nullopt (with every problem reported) when it cannot be
// read or any entry is wrong.
[[nodiscard]] std::optional<std::vector<OpStats>> read_stats(const std::filesystem::path& path, SourceManager& sources,
                                                             DiagnosticEngine& diags);

}  // namespace autocastgen::cli
