// The rank of this process in a distributed job, for insight's file names and messages. Not installed.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace autocastgen::stats::detail {

// Note [rank from the environment]
// The rank comes from RANK, which torchrun (and torch.distributed's env:// initialisation) set in
// every rank's environment: the runtime does not link c10d's Python groups, and a statistics path
// is resolved when the file is written (at exit or flush), after a launcher or the script itself
// has set it. Empty when RANK is unset or not a number (one process).
inline std::string rank_from_env() {
  const char* value = std::getenv("RANK");
  if (value == nullptr || *value == '\0') return {};
  for (const char* c = value; *c != '\0'; ++c)
    if (*c < '0' || *c > '9') return {};
  return value;
}

// `path` with every "{rank}" replaced by the rank (0 in a single process, Note [rank from the environment]).
inline std::string with_rank(std::string path) {
  static constexpr std::string_view kField = "{rank}";
  const std::string rank = rank_from_env().empty() ? "0" : rank_from_env();
  for (size_t at = path.find(kField); at != std::string::npos; at = path.find(kField, at + rank.size()))
    path.replace(at, kField.size(), rank);
  return path;
}

}  // namespace autocastgen::stats::detail
