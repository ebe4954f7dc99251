// Formatting of diagnostics: location prefix, severity, message, source line and caret.
#include "support/diagnostics.h"

#include <algorithm>

#include <fmt/format.h>

namespace autocastgen {

namespace {
const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::error: return "error";
    case Severity::warning: return "warning";
    case Severity::note: return "note";
  }
  return "error";
}
}  // namespace

void DiagnosticEngine::report(Severity severity, SourceLocation location, std::string message, uint32_t length) {
  reported_.push_back({severity, location, std::max<uint32_t>(length, 1), std::move(message)});
  if (severity == Severity::error) ++errors_;
  if (severity == Severity::warning) ++warnings_;
  out_ << format(reported_.back());
  out_.flush();
}

std::string DiagnosticEngine::format(const Diagnostic& d) const {
  if (!d.location.valid()) return fmt::format("autocastgen: {}: {}\n", severity_name(d.severity), d.message);
  const LineColumn lc = sources_.line_column(d.location);
  std::string text = fmt::format("{}:{}:{}: {}: {}\n", sources_.name(d.location.file), lc.line, lc.column,
                                 severity_name(d.severity), d.message);
  const std::string_view line = sources_.line_text(d.location);
  // Control bytes (a NUL, a UTF-16 file) print as '?': one column each, so the caret lines up.
  for (char c : line) text.push_back((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7F ? '?' : c);
  text.push_back('\n');
  // Keep tabs so the caret lines up under the same bytes in a terminal.
  for (uint32_t i = 0; i + 1 < lc.column && i < line.size(); ++i) text.push_back(line[i] == '\t' ? '\t' : ' ');
  text.push_back('^');
  const uint32_t room = line.size() >= lc.column ? static_cast<uint32_t>(line.size()) - lc.column : 0;
  text.append(std::min(d.length - 1, room), '~');
  text.push_back('\n');
  return text;
}

}  // namespace autocastgen
