// Small string helpers shared by the phases: edit distance and did-you-mean suggestions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace autocastgen {

// Levenshtein distance, giving up (returning limit + 1) once it exceeds `limit`.
[[nodiscard]] size_t edit_distance(std::string_view a, std::string_view b, size_t limit);

// The candidate closest to `word` when it is close enough to be a plausible typo, else "".
// Ties keep the first candidate, so callers control the order.
[[nodiscard]] std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace autocastgen
