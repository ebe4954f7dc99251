// libFuzzer entry point: any bytes through the generator's one escaping function (Note [data in
// generated code]). The literal decodes back to exactly those bytes, holds printable ASCII only,
// and the escaped text can end a `//` comment: no line break, no trailing backslash, no trigraph.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cpp_literal_decoder.h"
#include "emit/cpp_text.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autocastgen;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string literal = emit::cpp_string_literal(bytes);
  const std::optional<std::string> decoded = test::decode_cpp_string_literal(literal);
  FUZZ_CHECK(decoded.has_value(), literal);
  FUZZ_CHECK(*decoded == bytes, literal);
  const std::string escaped = emit::cpp_escaped(bytes);
  FUZZ_CHECK(literal == "\"" + escaped + "\"", literal);
  FUZZ_CHECK(escaped.empty() || escaped.back() != '\\', escaped);
  FUZZ_CHECK(escaped.find("??") == std::string::npos, escaped);
  FUZZ_CHECK(!emit::find_raw_control_byte(escaped).has_value(), escaped);
  for (const char c : escaped) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f, escaped);
  // A name: renamed at most by one trailing underscore, and never left reserved.
  const std::string name = emit::cpp_identifier(bytes);
  FUZZ_CHECK(name == bytes || name == bytes + "_", name);
  return 0;
}
