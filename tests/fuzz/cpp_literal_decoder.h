// A decoder of C++ narrow string literals (the escapes of [lex.ccon]), written apart from the
// generator's escaping so that tests and the fuzz target check one against the other.
#pragma once

#include <cctype>
#include <optional>
#include <string>
#include <string_view>

namespace autocastgen::test {

// The bytes a literal `"..."` holds; nullopt when it is not one literal of printable ASCII with
// valid escapes (a raw byte outside printable ASCII counts as invalid: generated code has none).
inline std::optional<std::string> decode_cpp_string_literal(std::string_view literal) {
  if (literal.size() < 2 || literal.front() != '"' || literal.back() != '"') return std::nullopt;
  const std::string_view body = literal.substr(1, literal.size() - 2);
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const auto byte = static_cast<unsigned char>(body[i]);
    if (byte < 0x20 || byte >= 0x7f || body[i] == '"') return std::nullopt;
    if (body[i] == '?' && i + 2 < body.size() && body[i + 1] == '?') return std::nullopt;  // a trigraph's start
    if (body[i] != '\\') {
      out.push_back(body[i]);
      continue;
    }
    if (++i == body.size()) return std::nullopt;
    const char e = body[i];
    switch (e) {
      case '"': case '\'': case '?': case '\\': out.push_back(e); continue;
      case 'a': out.push_back('\a'); continue;
      case 'b': out.push_back('\b'); continue;
      case 'f': out.push_back('\f'); continue;
      case 'n': out.push_back('\n'); continue;
      case 'r': out.push_back('\r'); continue;
      case 't': out.push_back('\t'); continue;
      case 'v': out.push_back('\v'); continue;
      default: break;
    }
    if (e >= '0' && e <= '7') {  // up to three octal digits
      unsigned value = 0;
      size_t digits = 0;
      for (; digits < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++digits, ++i) value = value * 8 + static_cast<unsigned>(body[i] - '0');
      --i;
      if (value > 0xff) return std::nullopt;
      out.push_back(static_cast<char>(value));
      continue;
    }
    if (e == 'x') {  // as many hex digits as follow
      unsigned value = 0;
      size_t digits = 0;
      for (++i; i < body.size() && std::isxdigit(static_cast<unsigned char>(body[i])); ++i, ++digits) {
        value = value * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(body[i])) ? body[i] - '0' : (body[i] | 0x20) - 'a' + 10);
        if (value > 0xff) return std::nullopt;
      }
      --i;
      if (!digits) return std::nullopt;
      out.push_back(static_cast<char>(value));
      continue;
    }
    return std::nullopt;
  }
  return out;
}

}  // namespace autocastgen::test
