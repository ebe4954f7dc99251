// The fp8 `select: measured` decisions file: read whole or not at all, written atomically.
#include "fp8/decisions_file.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include "support/atomic_file.h"
#include "support/strings.h"

namespace autocastgen::fp8 {

namespace {

// Note [the fp8 decisions file]
// One line per class, `key<TAB>fp8_ms<TAB>lower_ms`, then `#end rows=N fnv1a64=H`: the number of
// rows and the FNV-1a hash of every byte before that line. A cut row read as a time would flip a
// decision (`0.5` of `0.57`), so the file is taken whole or not at all: without its last line, with
// another count or hash, or with a row that does not parse in full (both times finite and > 0), it
// is damaged -- cut short by a full disk or a crash, or edited -- and read as empty, with a
// warning: its classes are measured again and the file written anew. Writes go through the
// atomic-write helper as records (fsync'ed; support/atomic_file.h), so a reader sees the old file
// or the new one; ranks writing the same classes at once leave one whole file. A file larger
// than kMaxFp8DecisionsBytes is damaged too (a file of ~100-byte rows; real ones hold dozens).
constexpr std::uintmax_t kMaxFp8DecisionsBytes = std::uintmax_t{16} << 20;

std::string fp8_decisions_hash(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

// The shortest text that reads back as `value`.
std::string fp8_decisions_number(double value) {
  char text[32];
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

std::string fp8_decisions_end_line(size_t rows, std::string_view body) {
  return c10::str("#end rows=", rows, " fnv1a64=", fp8_decisions_hash(body));
}

std::optional<double> fp8_decisions_time(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || !(value > 0)) return std::nullopt;
  return value;
}

// The rows of the whole file `text`, or why it is damaged (Note [the fp8 decisions file]).
std::variant<DecisionRows, std::string> parse_fp8_decisions(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::string("it does not end with a whole line");
  const size_t last = text.rfind('\n', text.size() - 2);
  const std::string_view body = text.substr(0, last == std::string_view::npos ? 0 : last + 1);
  const std::string_view end_line = text.substr(body.size(), text.size() - body.size() - 1);
  DecisionRows rows;
  size_t count = 0;
  for (size_t start = 0; start < body.size(); ++count) {
    const size_t newline = body.find('\n', start);
    const std::string_view line = body.substr(start, newline - start);
    start = newline + 1;
    const size_t tab1 = line.find('\t');
    const size_t tab2 = tab1 == std::string_view::npos ? tab1 : line.find('\t', tab1 + 1);
    const std::optional<double> fp8_ms =
        tab2 == std::string_view::npos ? std::nullopt : fp8_decisions_time(line.substr(tab1 + 1, tab2 - tab1 - 1));
    const std::optional<double> lower_ms = fp8_ms ? fp8_decisions_time(line.substr(tab2 + 1)) : std::nullopt;
    if (!lower_ms) return c10::str("line ", count + 1, " is not `key<TAB>fp8_ms<TAB>lower_ms`");
    rows[std::string(line.substr(0, tab1))] = {*fp8_ms, *lower_ms};
  }
  if (end_line != fp8_decisions_end_line(count, body))
    return std::string(end_line.starts_with("#end ") ? "its end line does not match its rows (a changed or cut file)"
                                                     : "it has no end line (cut short, or written by an older autocastgen)");
  return rows;
}

}  // namespace

DecisionRows read_decisions_file(const std::string& path) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return {};  // absent (or unreadable: written anew after the next measurement)
  std::string why;
  if (size > kMaxFp8DecisionsBytes) {
    why = c10::str("it is larger than ", kMaxFp8DecisionsBytes >> 20, " MiB");
  } else {
    std::ifstream in(path, std::ios::binary);
    std::string text(size, '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(size)) || in.peek() != std::ifstream::traits_type::eof()) {
      why = "it could not be read whole";
    } else {
      std::variant<DecisionRows, std::string> parsed = parse_fp8_decisions(text);
      if (auto* rows = std::get_if<DecisionRows>(&parsed)) return std::move(*rows);
      why = std::get<std::string>(parsed);
    }
  }
  TORCH_WARN("autocastgen: the fp8 selection cache ", terminal_text(path), " is damaged (", why,
             "); its classes are measured again");
  return {};
}

void write_decisions_file(const std::string& path, const DecisionRows& rows) {
  std::string body;
  for (const auto& [key, times] : rows)
    body += c10::str(key, '\t', fp8_decisions_number(times.first), '\t', fp8_decisions_number(times.second), '\n');
  const std::string text = body + fp8_decisions_end_line(rows.size(), body) + '\n';
  std::string error;
  if (!write_file_atomically(path, text, error, {.durable = true})) {
    TORCH_WARN_ONCE("autocastgen: cannot write the fp8 selection cache ", terminal_text(path), ": ", error,
                    " (decisions are kept in memory)");
  }
}

}  // namespace autocastgen::fp8
