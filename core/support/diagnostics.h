// One diagnostics engine for every phase: `file:line:col: error: message`, the source line, a caret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "support/source_manager.h"

namespace autocastgen {

enum class Severity { error, warning, note };

struct Diagnostic {
  Severity severity;
  SourceLocation location;  // may be invalid: then the message names no place
  uint32_t length;          // bytes to underline after the caret (>= 1)
  std::string message;
};

// Errors (and, apart, warnings) printed and kept per engine; later ones are counted only, and so
// are the notes that belong to them (Note [diagnostics are bounded] in diagnostics.cpp).
inline constexpr size_t kMaxShownDiagnostics = 20;

// A source line longer than this is shown as the kLongLineContext bytes either side of the
// column, with "..." for the rest (a minified file, a 60,000-space line).
inline constexpr size_t kMaxShownLine = 400;
inline constexpr size_t kLongLineContext = 100;

// Prints each diagnostic as it is reported and counts errors. Phases report everything they find
// and the driver stops at phase boundaries when has_errors() (LLVM style); outputs are written
// only when no error was reported.
class DiagnosticEngine {
 public:
  DiagnosticEngine(const SourceManager& sources, std::ostream& out) : sources_(sources), out_(out) {}

  void report(Severity severity, SourceLocation location, std::string message, uint32_t length = 1);
  void error(SourceLocation location, std::string message, uint32_t length = 1) {
    report(Severity::error, location, std::move(message), length);
  }
  void warning(SourceLocation location, std::string message, uint32_t length = 1) {
    report(Severity::warning, location, std::move(message), length);
  }
  void note(SourceLocation location, std::string message, uint32_t length = 1) {
    report(Severity::note, location, std::move(message), length);
  }

  // Every error reported, shown or not.
  [[nodiscard]] size_t error_count() const { return errors_; }
  // "3 errors", or "1234 errors (1214 not shown)" once some were only counted: for summary lines.
  [[nodiscard]] std::string error_summary() const;
  [[nodiscard]] size_t warning_count() const { return warnings_; }
  [[nodiscard]] bool has_errors() const { return errors_ != 0; }
  // The diagnostics shown (the first kMaxShownDiagnostics errors and warnings and their notes).
  [[nodiscard]] const std::vector<Diagnostic>& diagnostics() const { return reported_; }
  [[nodiscard]] const SourceManager& sources() const { return sources_; }

  // The text a diagnostic prints (also used by tests to compare against golden files).
  [[nodiscard]] std::string format(const Diagnostic& diagnostic) const;

 private:
  const SourceManager& sources_;
  std::ostream& out_;
  std::vector<Diagnostic> reported_;
  size_t errors_ = 0;
  size_t warnings_ = 0;
  size_t hidden_errors_ = 0;
  size_t hidden_warnings_ = 0;
  bool hiding_notes_ = false;  // the error or warning the next notes belong to was not shown
};

}  // namespace autocastgen
