// A JSON reader that keeps the source location of every value, for precise manifest diagnostics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/diagnostics.h"

namespace autocastgen::audit {

class JsonValue {
 public:
  enum class Kind { null, boolean, number, string, array, object };
  using Member = std::pair<JsonValue, JsonValue>;  // the key is a string value

  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] bool is_string() const { return kind_ == Kind::string; }
  [[nodiscard]] bool is_array() const { return kind_ == Kind::array; }
  [[nodiscard]] bool is_object() const { return kind_ == Kind::object; }
  [[nodiscard]] SourceLocation location() const { return location_; }
  [[nodiscard]] uint32_t length() const { return length_; }  // bytes of the value's text (the first line for containers)

  [[nodiscard]] bool boolean() const { return boolean_; }
  // The decoded text of a string; the literal text of a number.
  [[nodiscard]] const std::string& text() const { return text_; }
  [[nodiscard]] const std::vector<JsonValue>& items() const { return items_; }
  [[nodiscard]] const std::vector<Member>& members() const { return members_; }
  // The value of member `key`, or nullptr.
  [[nodiscard]] const JsonValue* find(std::string_view key) const;

  // "a string", "an array", ... for diagnostics.
  [[nodiscard]] std::string_view describe() const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::null;
  SourceLocation location_;
  uint32_t length_ = 1;
  bool boolean_ = false;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

// Nesting deeper than this is rejected (the reader is recursive).
inline constexpr size_t kMaxJsonDepth = 256;

// Parses `file` as one JSON document (RFC 8259; a leading UTF-8 byte-order mark is skipped).
// Reports the first syntax error, and every duplicate object key, to `diags`; nullopt on error.
[[nodiscard]] std::optional<JsonValue> parse_json(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags);

}  // namespace autocastgen::audit
