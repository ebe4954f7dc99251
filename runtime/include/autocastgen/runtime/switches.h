// The drivers' switch word (Note [one switch word]): what is on, as bits of one word. Declared in
// the state's room, below everything that writes it or reads it (Note [runtime layers] in
// runtime/CMakeLists.txt): the statistics, the watch and the range record (insight) write theirs,
// module sections (modules.cpp) theirs, and the drivers (policy_call.h) read it. The names keep
// the `stats::detail` spelling they had when the statistics alone owned the word.
#pragma once

#include <atomic>
#include <cstdint>

#include <c10/macros/Export.h>

namespace autocastgen::stats::detail {

// Note [one switch word]: what is on, as bits of one word, so that a driver call pays one relaxed
// load and a branch while everything is off. Each writer owns its bits and sets them with
// set_switches under its own lock (the statistics' mutex; the module rules' mutex); read relaxed
// on every driver call.
inline constexpr uint32_t kCounting = 1U;   // statistics (AUTOCASTGEN_STATS, StatsScope, ...)
inline constexpr uint32_t kWatch = 2U;      // the non-finite watch (AUTOCASTGEN_FINITE, FiniteWatch)
inline constexpr uint32_t kRanges = 4U;     // the range record (RangeScope, RecordScope)
inline constexpr uint32_t kRecordOnly = 8U; // record-only: casts nothing (AUTOCASTGEN_RECORD, RecordScope)
// A policy's `modules:` section is loaded (autocastgen/runtime/modules.h): drivers ask which
// section is in force. Not an insight switch: alone it counts nothing.
inline constexpr uint32_t kModules = 16U;
inline constexpr uint32_t kInsight = kCounting | kWatch | kRanges | kRecordOnly;
TORCH_API extern std::atomic<uint32_t> g_active;

// Every switch: zero while everything is off. A driver counts its call whenever a kInsight bit is set.
inline uint32_t active() { return g_active.load(std::memory_order_relaxed); }

// Makes the bits of `mask` those of `bits`, leaving the others as they are (one atomic update:
// writers of other bits never lose theirs).
TORCH_API void set_switches(uint32_t mask, uint32_t bits);

}  // namespace autocastgen::stats::detail
