// The schema lexer: token kinds, texts and offsets, numbers, strings with escapes, error tokens.
#include <gtest/gtest.h>

#include "schema/lexer.h"

namespace autocastgen::schema {
namespace {

std::string tokens(std::string_view text) {
  Lexer lexer(text);
  std::string out;
  for (;;) {
    const Token t = lexer.next();
    if (!out.empty()) out += ' ';
    out += std::string(describe(t.kind)) + "@" + std::to_string(t.offset);
    if (t.kind == TokenKind::identifier || t.kind == TokenKind::number || t.kind == TokenKind::string ||
        t.kind == TokenKind::error)
      out += "<" + std::string(t.text) + ">";
    if (t.kind == TokenKind::end || t.kind == TokenKind::error) return out;
  }
}

TEST(Lexer, Punctuation) {
  EXPECT_EQ(tokens("aten::add.Tensor(Tensor(a!)? x) -> ()"),
            "identifier@0<aten> '::'@4 identifier@6<add> '.'@9 identifier@10<Tensor> '('@16 identifier@17<Tensor> "
            "'('@23 identifier@24<a> '!'@25 ')'@26 '?'@27 identifier@29<x> ')'@30 '->'@32 '('@35 ')'@36 "
            "end of schema@37");
  EXPECT_EQ(tokens("[]|*,=-"), "'['@0 ']'@1 '|'@2 '*'@3 ','@4 '='@5 '-'@6 end of schema@7");
  EXPECT_EQ(tokens(":"), "invalid character@0<:>");
}

TEST(Lexer, WhitespaceIsSkipped) {
  EXPECT_EQ(tokens(" \t\r\n a \n"), "identifier@5<a> end of schema@8");
  EXPECT_EQ(tokens(""), "end of schema@0");
}

TEST(Lexer, Identifiers) {
  EXPECT_EQ(tokens("_foo __iand__ x1_2 A"),
            "identifier@0<_foo> identifier@5<__iand__> identifier@14<x1_2> identifier@19<A> end of schema@20");
}

TEST(Lexer, Numbers) {
  EXPECT_EQ(tokens("0 -1 0.5 1e-05 1E+3 -2.5e10 0.3333333333333333"),
            "number@0<0> number@2<-1> number@5<0.5> number@9<1e-05> number@15<1E+3> number@20<-2.5e10> "
            "number@28<0.3333333333333333> end of schema@46");
  // `-inf` is a minus and an identifier; an exponent without digits is not taken. A trailing dot
  // is (c10 prints whole floats as `2.`), unless a name follows it.
  EXPECT_EQ(tokens("-inf"), "'-'@0 identifier@1<inf> end of schema@4");
  EXPECT_EQ(tokens("1."), "number@0<1.> end of schema@2");
  EXPECT_EQ(tokens("2.,"), "number@0<2.> ','@2 end of schema@3");
  EXPECT_EQ(tokens("1.e5"), "number@0<1> '.'@1 identifier@2<e5> end of schema@4");
  EXPECT_EQ(tokens("1e"), "number@0<1> identifier@1<e> end of schema@2");
  EXPECT_EQ(tokens("2d"), "number@0<2> identifier@1<d> end of schema@2");
  EXPECT_EQ(tokens("- 1"), "'-'@0 number@2<1> end of schema@3");
  EXPECT_EQ(tokens("->1"), "'->'@0 number@2<1> end of schema@3");
}

TEST(Lexer, StringsKeepQuotesAndEscapes) {
  EXPECT_EQ(tokens(R"("mean" 'linear' "")"), R"(string@0<"mean"> string@7<'linear'> string@16<""> end of schema@18)");
  EXPECT_EQ(tokens(R"('"\'\\' "\"'\\")"), R"(string@0<'"\'\\'> string@8<"\"'\\"> end of schema@15)");
  EXPECT_EQ(tokens(R"("a\)"), R"(invalid character@0<"a\>)");  // escaped quote: unterminated
  EXPECT_EQ(tokens(R"("abc)"), R"(invalid character@0<"abc>)");
  EXPECT_EQ(tokens("'"), "invalid character@0<'>");
}

TEST(Lexer, ErrorTokensCoverWholeUtf8Characters) {
  EXPECT_EQ(tokens("a $"), "identifier@0<a> invalid character@2<$>");
  EXPECT_EQ(tokens("\xC3\xA9x"), "invalid character@0<\xC3\xA9>");
  EXPECT_EQ(tokens("\xE2\x82\xAC"), "invalid character@0<\xE2\x82\xAC>");
  EXPECT_EQ(tokens("\xF0\x9F\x98\x80!"), "invalid character@0<\xF0\x9F\x98\x80>");
  EXPECT_EQ(tokens("\xE2\x82"), "invalid character@0<\xE2\x82>");  // truncated sequence
  EXPECT_EQ(tokens("\xC3x"), "invalid character@0<\xC3>");          // lead byte without continuation
  EXPECT_EQ(tokens("\x80\x80"), "invalid character@0<\x80>");       // stray continuation byte
  EXPECT_EQ(utf8_length('a'), 1u);
  EXPECT_EQ(utf8_length(0xC3), 2u);
  EXPECT_EQ(utf8_length(0xE2), 3u);
  EXPECT_EQ(utf8_length(0xF0), 4u);
  EXPECT_EQ(utf8_length(0xC0), 1u);  // overlong lead bytes start nothing
  EXPECT_EQ(utf8_length(0xFF), 1u);
}

TEST(Lexer, WordReadsRightAtThePosition) {
  Lexer lexer("add.2d_x (");
  EXPECT_EQ(lexer.next().text, "add");
  EXPECT_EQ(lexer.next().kind, TokenKind::dot);
  const Token w = lexer.word();
  EXPECT_EQ(w.text, "2d_x");
  EXPECT_EQ(w.offset, 4u);
  EXPECT_EQ(lexer.word().text, "");  // a space follows: nothing
  EXPECT_EQ(lexer.next().kind, TokenKind::lparen);
  EXPECT_EQ(lexer.next().kind, TokenKind::end);
  EXPECT_EQ(lexer.next().kind, TokenKind::end);  // stays at the end
}

}  // namespace
}  // namespace autocastgen::schema
