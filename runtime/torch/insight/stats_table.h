// The statistics' tables as stats.cpp keeps them and stats_json.cpp writes them (internal).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "autocastgen/runtime/stats.h"

namespace autocastgen::stats::detail {

// (op, rule, module): the module is the innermost attached module's path id
// (autocastgen/runtime/modules.h; 0 outside every module), printed as `"module"`.
using Key = std::tuple<std::string, Policy, uint32_t>;

// Note [events in the file]: a row's first non-finite event (the watch's message and the user's
// line), so that a file names where each op first went non-finite, not only the process's first.
// Kept when the watch is on (any mode but off), at the event: at most one Python call per row.
struct Event {
  std::string message;
  std::string line;
};

// A table: counts per (op, rule, module), those of compiled graphs, first events.
struct Table {
  std::map<Key, OpCounters> ops;
  std::map<Key, uint64_t> compiled_calls;  // of ops' calls, those a compiled graph made (traced_calls.cpp)
  std::map<Key, Event> events;

  void clear() {
    ops.clear();
    compiled_calls.clear();
    events.clear();
  }
};

// A table's JSON form (the file AUTOCASTGEN_STATS writes, docs/insight.md): rows by calls, most
// first, then by op, rule and module path.
std::string to_json(const Table& table);

}  // namespace autocastgen::stats::detail
