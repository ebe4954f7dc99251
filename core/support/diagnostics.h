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

  [[nodiscard]] size_t error_count() const { return errors_; }
  [[nodiscard]] size_t warning_count() const { return warnings_; }
  [[nodiscard]] bool has_errors() const { return errors_ != 0; }
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
};

}  // namespace autocastgen
