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

// Note [yaml limits]: what one document may cost, whoever wrote it (issue 47; docs/cli.md#limits).
// yaml-cpp reads about 2 MB/s of small nodes and the tree takes ~120 bytes a node. A file's size,
// by kind (checked before it is read whole): the shipped policies are under 5 KB and a policy of
// every aten overload ~150 KB, so 1 MiB of policy ends within ~0.5 s and ~90 MB whatever it holds;
// native_functions.yaml is 0.6 MB (the large-input test reads 11 MB); a statistics file takes
// ~550 bytes a row. The node limit bounds the tree of the larger kinds (~2.5 s, ~250 MB at most).
inline constexpr size_t kMaxPolicyFileBytes = size_t{1} << 20;   // 1 MiB: policy files, policy text, rules
inline constexpr size_t kMaxSchemaFileBytes = size_t{16} << 20;  // 16 MiB: schema files
inline constexpr size_t kMaxRecordFileBytes = size_t{32} << 20;  // 32 MiB: statistics files, manifests

// Nodes in one document, aliases' copies included: bounds the tree of any file.
inline constexpr size_t kMaxYamlNodes = 1'000'000;

// Aliases copy the anchored node; a few bytes of nested aliases could otherwise expand into
// billions of nodes ("billion laughs"), or a few copies of one long scalar into gigabytes. Past
// this many bytes copied by anchors and aliases (each node's size in memory plus its scalar's
// bytes) the file is rejected; the copies' nodes also count towards kMaxYamlNodes.
inline constexpr size_t kMaxYamlCopiedBytes = size_t{64} << 20;  // 64 MiB

// Sequences and mappings nested deeper than this are an error at the first one past it (yaml-cpp
// would recurse on, and fail with "bad file"); policy and schema files need a handful of levels.
inline constexpr size_t kMaxYamlDepth = 64;

// Parses the single YAML document in `file`. Reports syntax errors (and tabs used for
// indentation) to `diags`. An empty document gives a null node. A leading UTF-8 byte-order mark
// is skipped; locations still count it. A UTF-16 or UTF-32 file, bytes that are not UTF-8 and
// control characters (Note [bytes YAML cannot hold] in yaml_text.cpp), nesting deeper than
// kMaxYamlDepth and a document over the limits of Note [yaml limits] are errors; a file over
// `max_bytes` is not parsed. `language` names the document in syntax errors ("invalid JSON: ..." for JSON read as YAML) and
// in control-character errors; `files` names what the file is in encoding errors ("statistics
// files must be UTF-8").
[[nodiscard]] std::optional<YamlNode> parse_yaml(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags,
                                                 std::string_view language = "YAML",
                                                 std::string_view files = "policy and schema files",
                                                 size_t max_bytes = kMaxPolicyFileBytes);

}  // namespace autocastgen
