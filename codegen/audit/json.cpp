// Recursive-descent JSON reader with source locations (RFC 8259), reporting errors at the byte.
#include "audit/json.h"

#include <cctype>

#include <fmt/format.h>

namespace autocastgen::audit {

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const Member& m : members_)
    if (m.first.text_ == key) return &m.second;
  return nullptr;
}

std::string_view JsonValue::describe() const {
  switch (kind_) {
    case Kind::null: return "null";
    case Kind::boolean: return "a boolean";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::array: return "an array";
    case Kind::object: return "an object";
  }
  return "a value";
}

class JsonParser {
 public:
  JsonParser(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags)
      : file_(file), text_(sources.text(file)), diags_(diags) {}

  std::optional<JsonValue> run() {
    if (text_.starts_with("\xEF\xBB\xBF")) pos_ = 3;
    skip_space();
    if (pos_ == text_.size()) {
      fail("empty file: expected a JSON value");
      return std::nullopt;
    }
    JsonValue value;
    if (!parse_value(value, 0)) return std::nullopt;
    skip_space();
    if (pos_ != text_.size()) {
      fail("unexpected text after the JSON value");
      return std::nullopt;
    }
    if (duplicates_) return std::nullopt;
    return value;
  }

 private:
  bool fail(std::string message, uint32_t length = 1) {
    diags_.error(here(), std::move(message), length);
    return false;
  }
  // Reports at `offset` (just after the previous value, where the missing separator belongs).
  bool fail_at(size_t offset, std::string message) {
    diags_.error({file_, static_cast<uint32_t>(offset)}, std::move(message));
    return false;
  }
  [[nodiscard]] SourceLocation here() const { return {file_, static_cast<uint32_t>(pos_)}; }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  // What the next byte looks like, for "expected X, found Y" messages.
  [[nodiscard]] std::string found() const {
    if (pos_ >= text_.size()) return "the end of the file";
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", text_[pos_]);
    return fmt::format("byte 0x{:02x}", c);
  }

  bool parse_value(JsonValue& out, size_t depth) {
    if (depth > kMaxJsonDepth) return fail(fmt::format("nesting deeper than {} levels", kMaxJsonDepth));
    out.location_ = here();
    if (pos_ >= text_.size()) return fail("expected a JSON value, found the end of the file");
    switch (text_[pos_]) {
      case '{': return parse_object(out, depth);
      case '[': return parse_array(out, depth);
      case '"': out.kind_ = JsonValue::Kind::string; return parse_string(out.text_, out.length_);
      case 't': return parse_literal(out, "true", JsonValue::Kind::boolean, true);
      case 'f': return parse_literal(out, "false", JsonValue::Kind::boolean, false);
      case 'n': return parse_literal(out, "null", JsonValue::Kind::null, false);
      default: break;
    }
    if (text_[pos_] == '-' || (text_[pos_] >= '0' && text_[pos_] <= '9')) return parse_number(out);
    if (text_[pos_] == '\'') return fail("JSON strings use double quotes, not single quotes");
    return fail(fmt::format("expected a JSON value, found {}", found()));
  }

  bool parse_literal(JsonValue& out, std::string_view word, JsonValue::Kind kind, bool value) {
    if (text_.substr(pos_, word.size()) != word) {
      size_t end = pos_;
      while (end < text_.size() && std::isalnum(static_cast<unsigned char>(text_[end]))) ++end;
      return fail(fmt::format("unknown literal '{}' (JSON has true, false and null)", text_.substr(pos_, end - pos_)),
                  static_cast<uint32_t>(end - pos_));
    }
    out.kind_ = kind;
    out.boolean_ = value;
    out.length_ = static_cast<uint32_t>(word.size());
    pos_ += word.size();
    return true;
  }

  bool parse_number(JsonValue& out) {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        return fail("numbers must not have leading zeros");
    } else if (!digits()) {
      return fail(fmt::format("expected a digit, found {}", found()));
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail(fmt::format("expected a digit after '.', found {}", found()));
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return fail(fmt::format("expected a digit in the exponent, found {}", found()));
    }
    out.kind_ = JsonValue::Kind::number;
    out.text_ = std::string(text_.substr(start, pos_ - start));
    out.length_ = static_cast<uint32_t>(pos_ - start);
    return true;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool hex4(uint32_t& value) {
    value = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_])))
        return fail(fmt::format("expected 4 hex digits after '\\u', found {}", found()));
      const char c = text_[pos_];
      value = value * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return true;
  }

  bool parse_string(std::string& out, uint32_t& length) {
    const size_t start = pos_++;
    while (true) {
      if (pos_ >= text_.size()) {
        pos_ = start;
        return fail("unterminated string");
      }
      const char c = text_[pos_];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20)
        return fail(c == '\n' ? "unterminated string (a line break must be written \\n)"
                              : "control characters in strings must be escaped");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) continue;  // reported as unterminated
      const char e = text_[pos_];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          --pos_;
          const size_t escape = pos_;
          pos_ += 2;
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low = 0;
            if (text_.substr(pos_, 2) != "\\u") {
              pos_ = escape;
              return fail("a high surrogate escape must be followed by a low surrogate escape", 6);
            }
            pos_ += 2;
            if (!hex4(low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) {
              pos_ -= 6;
              return fail("expected a low surrogate escape (\\uDC00-\\uDFFF)", 6);
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            pos_ = escape;
            return fail("a low surrogate escape without a high one", 6);
          }
          append_utf8(out, cp);
          continue;  // pos_ is past the escape
        }
        default:
          --pos_;
          return fail(fmt::format("unknown escape '\\{}'", e), 2);
      }
      ++pos_;
    }
    ++pos_;
    length = static_cast<uint32_t>(pos_ - start);
    return true;
  }

  bool parse_array(JsonValue& out, size_t depth) {
    out.kind_ = JsonValue::Kind::array;
    ++pos_;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      skip_space();
      JsonValue item;
      if (!parse_value(item, depth + 1)) return false;
      out.items_.push_back(std::move(item));
      const size_t after_item = pos_;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == ']') return fail("trailing comma before ']'");
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return fail_at(after_item, fmt::format("expected ',' or ']' after this array item, found {}", found()));
    }
  }

  bool parse_object(JsonValue& out, size_t depth) {
    out.kind_ = JsonValue::Kind::object;
    ++pos_;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return fail(fmt::format("expected a member name in double quotes, found {}", found()));
      JsonValue key;
      key.kind_ = JsonValue::Kind::string;
      key.location_ = here();
      if (!parse_string(key.text_, key.length_)) return false;
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return fail(fmt::format("expected ':' after the member name, found {}", found()));
      ++pos_;
      skip_space();
      JsonValue value;
      if (!parse_value(value, depth + 1)) return false;
      const size_t after_member = pos_;
      for (const JsonValue::Member& previous : out.members_) {
        if (previous.first.text_ != key.text_) continue;
        // Keep going: every duplicate is worth reporting, and the syntax is fine.
        diags_.error(key.location_, fmt::format("duplicate member '{}'", key.text_), key.length_);
        diags_.note(previous.first.location_, "first defined here", previous.first.length_);
        duplicates_ = true;
        break;
      }
      out.members_.emplace_back(std::move(key), std::move(value));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == '}') return fail("trailing comma before '}'");
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return fail_at(after_member, fmt::format("expected ',' or '}}' after this member, found {}", found()));
    }
  }

  uint32_t file_;
  std::string_view text_;
  DiagnosticEngine& diags_;
  size_t pos_ = 0;
  bool duplicates_ = false;
};

std::optional<JsonValue> parse_json(const SourceManager& sources, uint32_t file, DiagnosticEngine& diags) {
  return JsonParser(sources, file, diags).run();
}

}  // namespace autocastgen::audit
