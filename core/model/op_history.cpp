// Parsing the op-history table and answering lookups.
#include "model/op_history.h"

#include <sstream>
#include <stdexcept>

namespace autocastgen::model {

extern const char kOpHistoryText[];  // embedded by cmake/EmbedFile.cmake

std::string ReleaseSpan::str() const {
  return first == last ? first.str() : first.str() + "-" + last.str();
}

const OpHistory& OpHistory::builtin() {
  static const OpHistory history = [] {
    std::string error;
    std::optional<OpHistory> parsed = parse(kOpHistoryText, error);
    // The table is checked by a test at build time; a broken one is a packaging bug.
    if (!parsed) throw std::logic_error("autocastgen: the built-in op history is malformed: " + error);
    return std::move(*parsed);
  }();
  return history;
}

std::optional<OpHistory> OpHistory::parse(std::string_view text, std::string& error) {
  OpHistory history;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, first, last, extra;
    fields >> name >> first >> last;
    const auto a = TorchVersion::parse(first);
    const auto b = TorchVersion::parse(last);
    const size_t colons = name.find("::");
    if (name.empty() || !a || !b || *b < *a || colons == std::string::npos || (fields >> extra)) {
      error = "line " + std::to_string(number) + ": expected 'ns::name[.overload] FIRST LAST', found '" + line + "'";
      return std::nullopt;
    }
    const ReleaseSpan span{*a, *b};
    history.overloads_.insert_or_assign(name, span);
    const std::string op = name.substr(0, name.find('.', colons));
    auto [it, inserted] = history.ops_.try_emplace(op, span);
    if (!inserted) {
      if (span.first < it->second.first) it->second.first = span.first;
      if (it->second.last < span.last) it->second.last = span.last;
    }
  }
  return history;
}

std::optional<ReleaseSpan> OpHistory::overload(std::string_view qualified) const {
  auto it = overloads_.find(qualified);
  if (it == overloads_.end()) return std::nullopt;
  return it->second;
}

std::optional<ReleaseSpan> OpHistory::op(std::string_view ns, std::string_view name) const {
  auto it = ops_.find(std::string(ns) + "::" + std::string(name));
  if (it == ops_.end()) return std::nullopt;
  return it->second;
}

}  // namespace autocastgen::model
