// Hand-written scanner for schema strings: one pass, no allocation.
#include "schema/lexer.h"

namespace autocastgen::schema {

namespace {
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
}  // namespace

uint32_t utf8_length(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

std::string_view describe(TokenKind kind) {
  switch (kind) {
    case TokenKind::identifier: return "identifier";
    case TokenKind::number: return "number";
    case TokenKind::string: return "string";
    case TokenKind::lparen: return "'('";
    case TokenKind::rparen: return "')'";
    case TokenKind::lbracket: return "'['";
    case TokenKind::rbracket: return "']'";
    case TokenKind::question: return "'?'";
    case TokenKind::bang: return "'!'";
    case TokenKind::pipe: return "'|'";
    case TokenKind::star: return "'*'";
    case TokenKind::comma: return "','";
    case TokenKind::equals: return "'='";
    case TokenKind::dot: return "'.'";
    case TokenKind::colon_colon: return "'::'";
    case TokenKind::arrow: return "'->'";
    case TokenKind::minus: return "'-'";
    case TokenKind::end: return "end of schema";
    case TokenKind::error: return "invalid character";
  }
  return "token";
}

Token Lexer::next() {
  const auto size = static_cast<uint32_t>(text_.size());
  while (pos_ < size && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
    ++pos_;
  const uint32_t start = pos_;
  auto make = [&](TokenKind kind, uint32_t length) {
    pos_ = start + length;
    return Token{kind, start, text_.substr(start, length)};
  };
  if (pos_ >= size) return Token{TokenKind::end, size, {}};
  const char c = text_[pos_];
  if (is_ident_start(c)) {
    uint32_t end = pos_ + 1;
    while (end < size && is_ident_char(text_[end])) ++end;
    return make(TokenKind::identifier, end - start);
  }
  if (is_digit(c) || (c == '-' && pos_ + 1 < size && is_digit(text_[pos_ + 1]))) {
    uint32_t end = pos_ + 1;
    while (end < size && is_digit(text_[end])) ++end;
    // `2.5`, and `2.` as c10 prints whole floats (schemas read back from the dispatcher).
    if (end < size && text_[end] == '.' && (end + 1 == size || !is_ident_start(text_[end + 1]))) {
      ++end;
      while (end < size && is_digit(text_[end])) ++end;
    }
    if (end < size && (text_[end] == 'e' || text_[end] == 'E')) {
      uint32_t exp = end + 1;
      if (exp < size && (text_[exp] == '+' || text_[exp] == '-')) ++exp;
      if (exp < size && is_digit(text_[exp])) {
        end = exp;
        while (end < size && is_digit(text_[end])) ++end;
      }
    }
    return make(TokenKind::number, end - start);
  }
  if (c == '\'' || c == '"') {
    uint32_t end = pos_ + 1;
    while (end < size && text_[end] != c) end += (text_[end] == '\\' && end + 1 < size) ? 2 : 1;
    if (end >= size) return make(TokenKind::error, size - start);
    return make(TokenKind::string, end + 1 - start);
  }
  if (c == ':' && pos_ + 1 < size && text_[pos_ + 1] == ':') return make(TokenKind::colon_colon, 2);
  if (c == '-' && pos_ + 1 < size && text_[pos_ + 1] == '>') return make(TokenKind::arrow, 2);
  switch (c) {
    case '(': return make(TokenKind::lparen, 1);
    case ')': return make(TokenKind::rparen, 1);
    case '[': return make(TokenKind::lbracket, 1);
    case ']': return make(TokenKind::rbracket, 1);
    case '?': return make(TokenKind::question, 1);
    case '!': return make(TokenKind::bang, 1);
    case '|': return make(TokenKind::pipe, 1);
    case '*': return make(TokenKind::star, 1);
    case ',': return make(TokenKind::comma, 1);
    case '=': return make(TokenKind::equals, 1);
    case '.': return make(TokenKind::dot, 1);
    case '-': return make(TokenKind::minus, 1);
    default: {
      // Report a multi-byte UTF-8 character whole, so messages and carets show all of it.
      const uint32_t expected = utf8_length(static_cast<unsigned char>(c));
      uint32_t length = 1;
      while (length < expected && pos_ + length < size && (static_cast<unsigned char>(text_[pos_ + length]) & 0xC0) == 0x80)
        ++length;
      return make(TokenKind::error, length);
    }
  }
}

Token Lexer::word() {
  const auto size = static_cast<uint32_t>(text_.size());
  const uint32_t start = pos_;
  while (pos_ < size && is_ident_char(text_[pos_])) ++pos_;
  return Token{TokenKind::identifier, start, text_.substr(start, pos_ - start)};
}

}  // namespace autocastgen::schema
