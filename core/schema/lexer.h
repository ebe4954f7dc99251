// Tokens of the function-schema language, with their byte offsets inside the schema string.
#pragma once

#include <cstdint>
#include <string_view>

namespace autocastgen::schema {

enum class TokenKind : uint8_t {
  identifier,  // [A-Za-z_][A-Za-z0-9_]*
  number,      // -?digits[.digits][e[+-]digits]
  string,      // '...' or "..." with backslash escapes, quotes included
  lparen, rparen, lbracket, rbracket, question, bang, pipe, star, comma, equals, dot,
  colon_colon, arrow, minus,
  end,
  error,  // an unexpected character (a whole UTF-8 sequence) or an unterminated string
};

[[nodiscard]] std::string_view describe(TokenKind kind);
// Bytes of the UTF-8 sequence that `lead` starts (1 for ASCII and for bytes that start none).
[[nodiscard]] uint32_t utf8_length(unsigned char lead);

struct Token {
  TokenKind kind;
  uint32_t offset;  // into the schema string
  std::string_view text;
};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}
  [[nodiscard]] Token next();
  // `[A-Za-z0-9_]*` right at the current position, without skipping spaces (an overload name
  // after '.'); an empty identifier token when there is none.
  [[nodiscard]] Token word();
  [[nodiscard]] std::string_view text() const { return text_; }

 private:
  std::string_view text_;
  uint32_t pos_ = 0;
};

}  // namespace autocastgen::schema
