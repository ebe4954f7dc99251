// The fp8 `select: measured` decisions file (Note [the fp8 decisions file] in decisions_file.cpp).
#pragma once

#include <map>
#include <string>
#include <utility>

namespace autocastgen::fp8 {

// class key -> (fp8 ms, lower-precision ms)
using DecisionRows = std::map<std::string, std::pair<double, double>>;

// The rows of the file at `path`; none when it is absent, and none with a warning when it is
// damaged (cut short, edited, of an older format).
[[nodiscard]] DecisionRows read_decisions_file(const std::string& path);

// Writes `rows` to `path` whole or not at all (synced to disk); a failure warns once and leaves
// the previous file as it was.
void write_decisions_file(const std::string& path, const DecisionRows& rows);

}  // namespace autocastgen::fp8
