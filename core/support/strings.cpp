// Edit distance with an early cut-off, and the did-you-mean rule built on it.
#include "support/strings.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

namespace autocastgen {

size_t edit_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t diff = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (diff > limit) return limit + 1;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    size_t row_min = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
      row_min = std::min(row_min, row[j]);
    }
    if (row_min > limit) return limit + 1;
  }
  return std::min(row[b.size()], limit + 1);
}

std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates) {
  // A difference in case only is the likeliest typo of all.
  for (std::string_view candidate : candidates)
    if (candidate.size() == word.size() &&
        std::equal(candidate.begin(), candidate.end(), word.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return std::string(candidate);
  // Allow about one typo per three characters, at least one.
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string_view best;
  size_t best_distance = limit + 1;
  for (std::string_view candidate : candidates) {
    const size_t d = edit_distance(word, candidate, limit);
    // Ties go to the alphabetically first, so the answer does not depend on the candidates' order.
    if (d < best_distance || (d == best_distance && !best.empty() && candidate < best)) {
      best_distance = d;
      best = candidate;
    }
  }
  return std::string(best);
}

size_t utf8_sequence(std::string_view text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  const unsigned lead = byte(i);
  size_t length = 0;
  if (lead < 0x80) length = 1, code_point = lead;
  else if (lead >= 0xC2 && lead <= 0xDF) length = 2, code_point = lead & 0x1F;
  else if (lead >= 0xE0 && lead <= 0xEF) length = 3, code_point = lead & 0x0F;
  else if (lead >= 0xF0 && lead <= 0xF4) length = 4, code_point = lead & 0x07;
  else return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code_point < kMinimum[length] || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return 0;
  return length;
}

bool is_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t code_point = 0;
    const size_t length = utf8_sequence(text, i, code_point);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// Note [text for terminals]
// Names in statistics files, op names and messages in policies reach the terminal in tables and
// diagnostics. A name holding ESC [31m recolours the screen, ESC ] 0; retitles the window, a
// U+202E reverses what follows ("Trojan Source"); so every piece of such text is printed through
// terminal_text, which writes as escapes: C0 controls but tab (\n, \r, else \x1b), DEL (\x7f),
// C1 controls, which some terminals obey in UTF-8 (\u009b), the bidirectional controls U+202A..U+202E
// and U+2066..U+2069 and the line and paragraph separators U+2028, U+2029 (\u202e), and bytes that
// are not UTF-8 (\xff: in a Latin-1 terminal 0x9B is CSI). Backslashes are kept as they are.
bool is_terminal_control(uint32_t c) {
  return (c < 0x20 && c != '\t') || (c >= 0x7F && c <= 0x9F) || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069) || c == 0x2028 || c == 0x2029;
}

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t code_point = 0;
    const size_t length = utf8_sequence(text, i, code_point);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (!is_terminal_control(code_point)) out.append(text.substr(i, length));
    else if (code_point == '\n') out += "\\n";
    else if (code_point == '\r') out += "\\r";
    else if (code_point < 0x80) out += fmt::format("\\x{:02x}", code_point);
    else out += fmt::format("\\u{:04x}", code_point);
    i += length;
  }
  return out;
}

std::string shortened(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // not inside a sequence
  return std::string(text.substr(0, end)) + "...";
}

std::string yaml_quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
        else out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace autocastgen
