// The bytes of a YAML file checked before yaml-cpp reads them: encodings, control characters,
// tabs in indentation.
#include "support/yaml_text.h"

#include <algorithm>

#include <fmt/format.h>

#include "support/strings.h"

namespace autocastgen {

namespace {

// Note [bytes YAML cannot hold]
// yaml-cpp reads UTF-16 and UTF-32 files, NUL and other control bytes without a word and then
// fails on something else ("expected ':' after the mapping key", "unknown escape character",
// "bad file" for deep nesting: issue 19). So before parsing: a byte-order mark or the NUL pattern
// of YAML 1.2 section 5.2 (`00 xx`, `xx 00`, `00 00 00 xx`, `xx 00 00 00` at the start) names the
// encoding; then every control character YAML forbids (C0 but tab, LF and CR; DEL; C1 but NEL) and
// every byte that is not UTF-8 is an error at its offset (at most kMaxByteErrors of them, then a
// count). Nesting is limited while the tree is built (kMaxYamlDepth).
constexpr size_t kMaxByteErrors = 10;

// "UTF-16LE" and the like when `text` is in a UTF-16 or UTF-32 encoding, else empty.
std::string_view wide_encoding(std::string_view text) {
  auto at = [&](size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0x100; };
  if (at(0) == 0x00 && at(1) == 0x00 && at(2) == 0xFE && at(3) == 0xFF) return "UTF-32BE";
  if (at(0) == 0xFF && at(1) == 0xFE && at(2) == 0x00 && at(3) == 0x00) return "UTF-32LE";
  if (at(0) == 0xFE && at(1) == 0xFF) return "UTF-16BE";
  if (at(0) == 0xFF && at(1) == 0xFE) return "UTF-16LE";
  if (at(0) == 0x00 && at(1) == 0x00 && at(2) == 0x00 && at(3) != 0x100) return "UTF-32BE";
  if (at(0) != 0x00 && at(1) == 0x00 && at(2) == 0x00 && at(3) == 0x00) return "UTF-32LE";
  if (at(0) == 0x00 && at(1) != 0x100) return "UTF-16BE";
  if (at(0) != 0x00 && at(0) != 0x100 && at(1) == 0x00) return "UTF-16LE";
  return {};
}

}  // namespace

[[nodiscard]] bool check_bytes(uint32_t file, std::string_view text, DiagnosticEngine& diags, std::string_view language,
                               std::string_view files) {
  if (const std::string_view encoding = wide_encoding(text); !encoding.empty()) {
    diags.error({file, 0}, fmt::format("file is {} ({}-endian); {} must be UTF-8", encoding.substr(0, 6),
                                       encoding.ends_with("LE") ? "little" : "big", files));
    return false;
  }
  size_t found = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t code_point = 0;
    const size_t length = utf8_sequence(text, i, code_point);
    std::string problem;
    if (length == 0) {
      problem = fmt::format("byte 0x{:02X} is not UTF-8; {} must be UTF-8", static_cast<unsigned char>(text[i]), files);
    } else if (code_point == 0) {
      problem = fmt::format("NUL byte; {} text cannot hold control characters", language);
    } else if ((code_point < 0x20 && code_point != '\t' && code_point != '\n' && code_point != '\r') ||
               code_point == 0x7F || (code_point >= 0x80 && code_point <= 0x9F && code_point != 0x85)) {
      problem = fmt::format("control character U+{:04X}; {} text cannot hold control characters", code_point, language);
    }
    if (!problem.empty() && ++found <= kMaxByteErrors) diags.error({file, static_cast<uint32_t>(i)}, problem);
    i += std::max<size_t>(length, 1);
  }
  if (found > kMaxByteErrors)
    diags.error({file, 0}, fmt::format("{} more bytes that are not UTF-8 text (the first {} are shown)", found - kMaxByteErrors,
                                       kMaxByteErrors));
  return found == 0;
}

void report_tab_indentation(uint32_t file, std::string_view text, DiagnosticEngine& diags) {
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t i = line_start;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i < text.size() && text[i] == '\t') {
      diags.error({file, static_cast<uint32_t>(i)}, "tab character in indentation; YAML allows only spaces");
    }
    const size_t newline = text.find('\n', line_start);
    if (newline == std::string_view::npos) break;
    line_start = newline + 1;
  }
}

}  // namespace autocastgen
