// A YAML tree in which every node keeps its source location, built on yaml-cpp's event parser.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/diagnostics.h"

namespace autocastgen {

class YamlNode {
 public:
  enum class Kind { null, scalar, sequence, mapping };
  using Pair = std::pair<YamlNode, YamlNode>;

  YamlNode() = default;
  YamlNode(Kind kind, SourceLocation location) : kind_(kind), location_(location) {}

  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] bool is_scalar() const { return kind_ == Kind::scalar; }
  [[nodiscard]] bool is_sequence() const { return kind_ == Kind::sequence; }
  [[nodiscard]] bool is_mapping() const { return kind_ == Kind::mapping; }
  [[nodiscard]] bool is_null() const { return kind_ == Kind::null; }

  [[nodiscard]] SourceLocation location() const { return location_; }
  [[nodiscard]] const std::string& scalar() const { return scalar_; }
  // Where the scalar's text starts in the buffer, when its bytes appear there unchanged (plain
  // scalars, and quoted ones without escapes); nullopt otherwise.
  [[nodiscard]] std::optional<SourceLocation> exact_text_location() const;
  [[nodiscard]] uint32_t source_length() const { return source_length_; }
  [[nodiscard]] const std::vector<YamlNode>& items() const { return items_; }
  [[nodiscard]] const std::vector<Pair>& pairs() const { return pairs_; }
  // First value whose key is the scalar `key`, or nullptr.
  [[nodiscard]] const YamlNode* find(std::string_view key) const;

  // A short human name for diagnostics: "a scalar", "a sequence", ...
  [[nodiscard]] std::string_view describe() const;
  // The same in JSON's words ("an object", "an array", ...), for JSON documents read as YAML.
  [[nodiscard]] std::string_view describe_json() const;

 private:
  friend class YamlTreeBuilder;
  Kind kind_ = Kind::null;
  SourceLocation location_;
  std::string scalar_;
  bool text_exact_ = false;
  uint32_t text_offset_ = 0;  // offset of the scalar's text when text_exact_
  uint32_t source_length_ = 1;
  std::vector<YamlNode> items_;
  std::vector<Pair> pairs_;
};

// Aliases copy the anchored node; a few bytes of nested aliases could otherwise expand into
// billions of nodes ("billion laughs"). Past this many copied nodes the file is rejected.
inline constexpr size_t kMaxYamlAliasNodes = 1'000'000;

// Sequences and mappings nested deeper than this are an error at the first one past it (yaml-cpp
// would recurse on, and fail with "bad file"); policy and schema files need a handful of levels.
inline constexpr size_t kMaxYamlDepth = 64;

// Parses the single YAML document in `file`. Reports syntax errors (and tabs used for
// indentation) to `diags`. An empty document gives a null node. A leading UTF-8 byte-order mark
// is skipped; locations still count it. A UTF-16 or UTF-32 file, bytes that are not UTF-8, control
// characters and nesting deeper than kMaxYamlDepth are errors (Note [bytes YAML cannot hold]).
// `language` names the document in syntax errors ("invalid JSON: ..." for JSON read as YAML) and
// in control-character errors; `files` names what the file is in encoding errors ("statistics
// files must be UTF-8").
[[nodiscard]] std::optional<YamlNode> parse_yaml(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags,
                                                 std::string_view language = "YAML",
                                                 std::string_view files = "policy and schema files");

}  // namespace autocastgen
