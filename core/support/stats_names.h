// The bound on a name in a statistics file, shared by the runtime that writes the files and the
// readers of `autocastgen stats` and `report`: what the runtime writes, they read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace autocastgen {

// Note [names in statistics files]
// A name in a statistics file (an op, a module path, a dtype, an fp8 reason) is an identifier,
// not a label: `autocastgen stats --merge` adds the files of a job's ranks row by row by
// (op, rule, module), the report's diff matches rows the same way, and `advise` turns a record's
// module paths into places that must match `model.named_modules()`. So the runtime writes a
// name whole and the readers take it whole; tables shorten it where they show it (the stats
// verb's tables, Note [long names in tables] in codegen/cli/verb_stats.cpp; the report's tree,
// Note [bounded tree] in python/autocastgen/reporter/view.py). PyTorch takes any string as a
// submodule's name (add_module, setattr), so a path of 100,000 characters is a real run's.
//
// A file is still data from anywhere, so the readers refuse a name over kMaxStatsNameBytes with
// its place. The runtime never writes such a name: one past the bound is written as its first
// bytes (cut before a UTF-8 sequence) and a marker, "...[N bytes, FNV-1a H]", where N is the
// name's length and H the 64-bit FNV-1a hash of the whole name. The marker is a function of the
// name alone, so each rank writes the same name for the same module and `--merge` still adds
// their rows; two names that share their first MiB stay two; and the marker says that the name
// is not the module's path, so a place `advise` makes from it matches nothing rather than some
// other module.
//
// A member name (a dtype in `ran_in`, a reason in `fp8_skipped`) has a bound of its own: YAML
// reads an implicit key of at most 1024 characters from its first quote to its ':', and the C++
// reader (yaml-cpp) keeps that limit for JSON's member names, refusing a longer one as "invalid
// JSON: end of map flow not found". So the runtime writes a member name whose text between its
// quotes, escapes included, is at most kMaxStatsKeyBytes, shortened as above past it (an fp8
// reason names a policy's pattern, `place <pattern>`, which can be longer); the Python reader
// refuses a member name over kMaxStatsKeyBytes of UTF-8 (its text is at least that long).
//
// tests/python/insight/test_stats.py writes long names through real runs and reads them back with the
// CLI and the Python reporter; tests/report/test_report_hostile.py checks that both readers take
// a name of exactly the bound and refuse one byte more.
inline constexpr size_t kMaxStatsNameBytes = size_t{1} << 20;  // 1 MiB: ten times the longest path a test writes
inline constexpr size_t kMaxStatsKeyBytes = 1022;  // a member name's text between its quotes

// "...[N bytes, FNV-1a H]" for `name` (Note [names in statistics files]).
[[nodiscard]] inline std::string stats_name_marker(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325u;  // FNV-1a, 64 bits: stable across runs, ranks and builds
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3u;
  }
  char marker[64];
  const int length = std::snprintf(marker, sizeof marker, "...[%zu bytes, FNV-1a %016llx]", name.size(),
                                   static_cast<unsigned long long>(hash));
  return std::string(marker, static_cast<size_t>(length));
}

// At most the first `keep` bytes of `name`, cut before a UTF-8 sequence, then its marker.
[[nodiscard]] inline std::string stats_name_cut(std::string_view name, size_t keep) {
  while (keep > 0 && keep < name.size() && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  return std::string(name.substr(0, keep)) + stats_name_marker(name);
}

// `name` as the runtime writes it as a value (an op, a module path) into a statistics file.
[[nodiscard]] inline std::string stats_file_name(std::string_view name) {
  if (name.size() <= kMaxStatsNameBytes) return std::string(name);
  return stats_name_cut(name, kMaxStatsNameBytes - stats_name_marker(name).size());
}

}  // namespace autocastgen
