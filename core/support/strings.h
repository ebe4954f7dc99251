// Small string helpers shared by the phases: edit distance, did-you-mean suggestions, UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace autocastgen {

// Levenshtein distance, giving up (returning limit + 1) once it exceeds `limit`.
[[nodiscard]] size_t edit_distance(std::string_view a, std::string_view b, size_t limit);

// The candidate closest to `word` when it is close enough to be a plausible typo, else "".
// Ties keep the first candidate, so callers control the order.
[[nodiscard]] std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates);

// Length of the UTF-8 sequence at byte `i` of `text` (0 when none starts there: a stray or
// overlong byte, a surrogate, past U+10FFFF), and its code point.
[[nodiscard]] size_t utf8_sequence(std::string_view text, size_t i, uint32_t& code_point);

// Whether `text` is well-formed UTF-8.
[[nodiscard]] bool is_utf8(std::string_view text);

// `text` as a terminal may show it (Note [text for terminals]): what would move the cursor,
// recolour, retitle or reorder the output is written as an escape, the rest unchanged.
[[nodiscard]] std::string terminal_text(std::string_view text);

// Whether the UTF-8 sequence for `code_point` is one terminal_text escapes.
[[nodiscard]] bool is_terminal_control(uint32_t code_point);

// At most `max_bytes` of `text`, cut before a UTF-8 sequence, then "..." when anything was cut:
// long user text quoted in a message (a 5000-digit number) stays one short line.
[[nodiscard]] std::string shortened(std::string_view text, size_t max_bytes = 40);

// A YAML (and JSON-compatible) double-quoted scalar for `text`: escapes quotes, backslashes and
// control characters.
[[nodiscard]] std::string yaml_quoted(std::string_view text);

}  // namespace autocastgen
