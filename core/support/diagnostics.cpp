// Formatting of diagnostics: location prefix, severity, message, source line and caret.
#include "support/diagnostics.h"

#include <algorithm>

#include <fmt/format.h>

#include "support/strings.h"

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

// The source line as printed: every byte a terminal could take as a control (Note [text for
// terminals] in strings.cpp) becomes '?', one per byte, so the caret still lines up.
std::string printable_line(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    uint32_t code_point = 0;
    const size_t length = utf8_sequence(line, i, code_point);
    if (length == 0 || is_terminal_control(code_point)) {  // a tab is no control: kept
      out.append(std::max<size_t>(length, 1), '?');
    } else {
      out.append(line.substr(i, length));
    }
    i += std::max<size_t>(length, 1);
  }
  return out;
}
}  // namespace

// Note [diagnostics are bounded]
// A policy of a million unknown ops would otherwise print and keep a million errors (gigabytes,
// issue 47). The first kMaxShownDiagnostics errors are printed and kept, and apart from them the
// first as many warnings; later ones are counted only, with the notes that follow them, and the
// first of them prints one line saying so. error_count() stays the whole count, so every check
// that compares counts still sees each error, and summary lines say how many were not shown
// (error_summary()). 20 is clang's default -ferror-limit and what the report's Python reader shows
// per file: a screenful, enough to fix a file in a few rounds. Messages and source lines are
// printed as a terminal may show them (terminal_text); a long line only around its column.
void DiagnosticEngine::report(Severity severity, SourceLocation location, std::string message, uint32_t length) {
  if (severity == Severity::error) ++errors_;
  if (severity == Severity::warning) ++warnings_;
  if (severity != Severity::note) {
    size_t& hidden = severity == Severity::error ? hidden_errors_ : hidden_warnings_;
    hiding_notes_ = (severity == Severity::error ? errors_ : warnings_) > kMaxShownDiagnostics;
    if (hiding_notes_ && hidden++ == 0) {
      out_ << fmt::format("autocastgen: note: more than {} {}s; the rest are counted, not shown\n", kMaxShownDiagnostics,
                          severity_name(severity));
      out_.flush();
    }
  }
  if (hiding_notes_) return;
  reported_.push_back({severity, location, std::max<uint32_t>(length, 1), std::move(message)});
  out_ << format(reported_.back());
  out_.flush();
}

std::string DiagnosticEngine::error_summary() const {
  std::string text = fmt::format("{} error{}", errors_, errors_ == 1 ? "" : "s");
  if (hidden_errors_ != 0) text += fmt::format(" ({} not shown)", hidden_errors_);
  return text;
}

std::string DiagnosticEngine::format(const Diagnostic& d) const {
  const std::string message = terminal_text(d.message);
  if (!d.location.valid()) return fmt::format("autocastgen: {}: {}\n", severity_name(d.severity), message);
  const LineColumn lc = sources_.line_column(d.location);
  std::string text = fmt::format("{}:{}:{}: {}: {}\n", terminal_text(sources_.name(d.location.file)), lc.line, lc.column,
                                 severity_name(d.severity), message);
  std::string_view line = sources_.line_text(d.location);
  const size_t column = std::min<size_t>(lc.column - 1, line.size());  // bytes before the caret
  // A long line: kLongLineContext bytes either side of the column (cut before UTF-8 sequences).
  size_t begin = 0;
  size_t end = line.size();
  if (line.size() > kMaxShownLine) {
    const auto boundary = [&](size_t i) {
      while (i > 0 && i < line.size() && (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) --i;
      return i;
    };
    begin = boundary(column > kLongLineContext ? column - kLongLineContext : 0);
    end = boundary(std::min(line.size(), column + kLongLineContext));
  }
  const std::string_view before = begin > 0 ? "..." : "";
  text += std::string(before) + printable_line(line.substr(begin, end - begin)) + (end < line.size() ? "..." : "") + "\n";
  // Keep tabs so the caret lines up under the same bytes in a terminal.
  text.append(before.size(), ' ');
  for (size_t i = begin; i < column; ++i) text.push_back(line[i] == '\t' ? '\t' : ' ');
  text.push_back('^');
  const size_t room = end > column ? end - column - 1 : 0;
  text.append(std::min<size_t>(d.length - 1, room), '~');
  text.push_back('\n');
  return text;
}

}  // namespace autocastgen
