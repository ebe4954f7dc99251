// cpp_escaped and cpp_identifier (Note [data in generated code]): every byte value, round-tripped
// through a decoder of C++ escapes written here, and the names a wrapper may not use.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "cpp_literal_decoder.h"
#include "emit/cpp_text.h"

namespace autocastgen::emit {
namespace {

TEST(CppText, EveryByteRoundTripsThroughALiteral) {
  std::string all;
  for (int byte = 0; byte < 256; ++byte) all.push_back(static_cast<char>(byte));
  const std::string literal = cpp_string_literal(all);
  EXPECT_EQ(test::decode_cpp_string_literal(literal), all);
  for (const char c : literal) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 && byte < 0x7f) << "raw byte " << static_cast<int>(byte);
  }
}

TEST(CppText, EveryPairOfBytesRoundTrips) {  // an escape never swallows the byte after it
  for (int first = 0; first < 256; ++first)
    for (int second = 0; second < 256; ++second) {
      const std::string text = {static_cast<char>(first), static_cast<char>(second)};
      ASSERT_EQ(test::decode_cpp_string_literal(cpp_string_literal(text)), text) << first << " " << second;
      const std::string escaped = cpp_escaped(text);
      ASSERT_NE(escaped.back(), '\\') << first << " " << second;  // a // comment holding it ends at its line
    }
}

TEST(CppText, PrintableTextStaysReadable) {
  EXPECT_EQ(cpp_escaped("aten::mm(Tensor? self, str reduce='mean') -> Tensor"),
            "aten::mm(Tensor? self, str reduce='mean') -> Tensor");
  EXPECT_EQ(cpp_escaped("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(cpp_escaped("a\\b"), "a\\134b");
  EXPECT_EQ(cpp_escaped("a\nb\r\x01\t"), "a\\nb\\r\\001\\t");
  EXPECT_EQ(cpp_escaped("?\?/"), "?\\?/");  // no trigraph (the test spells its ?? with an escape too)
  EXPECT_EQ(cpp_escaped("\xe2\x80\xa8"), "\\342\\200\\250");  // U+2028 LINE SEPARATOR
  EXPECT_EQ(cpp_escaped(std::string("a\0" "1", 3)), "a\\0001");
}

TEST(CppText, NamesThatWouldBeCodeGetAnUnderscore) {
  for (const char* name : {"signed", "switch", "static", "default", "and", "xor_eq", "co_await", "requires", "typeof",
                           "assert", "errno", "linux", "NULL", "EOF", "TORCH_CHECK", "__cplusplus", "_GLIBCXX_X",
                           "rt", "State", "at", "c10", "std", "kDevice", "lower_precision", "int64_t", "mm_op", "kMmModules0"})
    EXPECT_EQ(cpp_identifier(name), std::string(name) + "_") << name;
  for (const char* name : {"self", "other", "dtype", "input", "weight", "bias", "kernel_size", "k", "keepdim", "Nx"})
    EXPECT_EQ(cpp_identifier(name), name) << name;
}

// Each list's first and last entries, and each rule at the edges of its letters and digits (the
// mutants of scripts/mutants' cpp_text list: docs/testing.md).
TEST(CppText, ReservedNamesAtTheEdgesOfEachRule) {
  for (const char* name : {"alignas", "alignof", "alloca", "i386", "m", "rt", "State", "_A", "_Z", "_Zx", "AAA", "ZZZ",
                           "A0B", "A9B", "A_B", "AB_", "kA", "kZ", "kZz", "x_op"})
    EXPECT_TRUE(is_reserved_cpp_name(name)) << name;
  for (const char* name : {"_", "_a", "_0", "AB", "A0", "ABc", "aBC", "k", "ka", "k0", "xop", "op", "M", "mm"})
    EXPECT_FALSE(is_reserved_cpp_name(name)) << name;
}

TEST(CppText, RawControlBytesAreFound) {
  EXPECT_EQ(find_raw_control_byte("int a;\n\tint b;\n"), std::nullopt);
  EXPECT_EQ(find_raw_control_byte("// caf\xc3\xa9\n"), std::nullopt);  // a template's own UTF-8
  EXPECT_EQ(find_raw_control_byte("// a\rb\n"), 4u);
  EXPECT_EQ(find_raw_control_byte(std::string("x\0", 2)), 1u);
  EXPECT_EQ(find_raw_control_byte("\x7f"), 0u);
}

}  // namespace
}  // namespace autocastgen::emit
