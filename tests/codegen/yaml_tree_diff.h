// Structural comparison of two located YAML trees (kinds, values, locations), naming the first difference.
#pragma once

#include <string>

#include "support/yaml.h"

namespace autocastgen::testing_support {

// "" when `a` and `b` are the same tree with the same locations; otherwise where they first differ.
inline std::string yaml_tree_diff(const YamlNode& a, const YamlNode& b, const std::string& path = "$") {
  auto where = [&](const YamlNode& n) {
    const auto exact = n.exact_text_location();
    return std::to_string(n.location().file) + ":" + std::to_string(n.location().offset) + " exact " +
           (exact ? std::to_string(exact->offset) : std::string("-")) + " length " + std::to_string(n.source_length());
  };
  if (a.kind() != b.kind()) return path + ": kind " + std::string(a.describe()) + " vs " + std::string(b.describe());
  if (a.location() != b.location() || a.exact_text_location() != b.exact_text_location() ||
      a.source_length() != b.source_length())
    return path + ": location " + where(a) + " vs " + where(b);
  if (a.scalar() != b.scalar()) return path + ": value '" + a.scalar() + "' vs '" + b.scalar() + "'";
  if (a.items().size() != b.items().size())
    return path + ": " + std::to_string(a.items().size()) + " vs " + std::to_string(b.items().size()) + " items";
  if (a.pairs().size() != b.pairs().size())
    return path + ": " + std::to_string(a.pairs().size()) + " vs " + std::to_string(b.pairs().size()) + " pairs";
  for (size_t i = 0; i < a.items().size(); ++i)
    if (std::string d = yaml_tree_diff(a.items()[i], b.items()[i], path + "[" + std::to_string(i) + "]"); !d.empty())
      return d;
  for (size_t i = 0; i < a.pairs().size(); ++i) {
    const std::string at = path + "{" + std::to_string(i) + "}";
    if (std::string d = yaml_tree_diff(a.pairs()[i].first, b.pairs()[i].first, at + ".key"); !d.empty()) return d;
    if (std::string d = yaml_tree_diff(a.pairs()[i].second, b.pairs()[i].second, at + ".value"); !d.empty()) return d;
  }
  return {};
}

}  // namespace autocastgen::testing_support
