// What the runtime says about what it did when nobody asked: nothing unless asked, through
// AUTOCASTGEN_LOG or Python's `logging` (logger "autocastgen"). Not installed.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/dispatch/Dispatcher.h>

namespace autocastgen::insight_log {

// Python's logging levels, so that a message keeps its level on the way there.
enum class Level : int { debug = 10, info = 20 };

// Note [quiet by default]
// Loading a policy replaces the kernels on its autocast key: that is what loading one is for, not
// something a user must act on, so it is no warning (a warning per replaced op printed 252 lines
// for the shipped cpu.yaml). What was replaced is said on request, in two ways:
// - AUTOCASTGEN_LOG=info (one line per load: how many, from where) or =debug (also one line per
//   op), printed to stderr; read once, when the library loads; any other value is off;
// - Python's `logging`: the package defines the op autocastgen::log_message(int level, str text)
//   (insight.py) that hands each message to the logger "autocastgen" at the same level, so
//   `logging.basicConfig(level=logging.INFO)` shows them. Without the package, no such op.
// Warnings (TORCH_WARN) stay for what a user must act on.
inline int stderr_threshold() {
  static const int threshold = [] {
    const char* value = std::getenv("AUTOCASTGEN_LOG");
    const std::string_view text = value == nullptr ? "" : value;
    if (text == "debug") return static_cast<int>(Level::debug);
    if (text == "info") return static_cast<int>(Level::info);
    return 1 << 30;  // off
  }();
  return threshold;
}

// `to_python`: false where Python must not be called (while the library itself loads).
inline void log(Level level, const std::string& message, bool to_python = true) {
  if (static_cast<int>(level) >= stderr_threshold()) {
    std::fprintf(stderr, "autocastgen: %s\n", message.c_str());
    std::fflush(stderr);
  }
  if (!to_python) return;
  try {
    const std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findSchema({"autocastgen::log_message", ""});
    if (!op.has_value() || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) return;
    op->typed<void(int64_t, const std::string&)>().call(static_cast<int64_t>(level), message);
  } catch (const std::exception&) {
    // A log line is never worth failing the call that made it.
  }
}

}  // namespace autocastgen::insight_log
