// Data into generated C++: the one escaping function, and the names the generator may declare.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace autocastgen::emit {

// Note [data in generated code]
// Everything a user can choose (file names, schemas, policy names, module patterns, `when:` values,
// banned messages, argument defaults) reaches generated C++ through cpp_escaped alone, in string
// literals and in comments alike. It keeps printable ASCII except `"` and `\`, writes newline, tab
// and carriage return as `\n`, `\t`, `\r`, every other byte as a three-digit octal escape (a
// following digit can never extend it), `"` as `\"`,
// the second `?` of `??` as `\?` (no trigraph in strict C++14), and `\` as `\134`, so that no
// escaped text ends in a backslash: a `//` comment holding one cannot continue onto the next line.
// Nothing it returns is special to a C++ lexer inside a literal or a comment, nor to the template
// step (Note [standalone lines] in templates.cpp uses a control byte).
[[nodiscard]] std::string cpp_escaped(std::string_view bytes);
// `"..."` around cpp_escaped(bytes).
[[nodiscard]] std::string cpp_string_literal(std::string_view bytes);

// A name from a schema (an argument, an op, an overload), usable as a C++ identifier of generated
// code: a C++ keyword or alternative token, a name reserved to the implementation (`__x`, `_X`), a
// name in the style of a macro (three or more capitals) or a macro the included headers define, and the
// names the generated code itself declares or uses (Note [names in generated wrappers]) get a
// trailing underscore.
[[nodiscard]] std::string cpp_identifier(std::string_view name);
[[nodiscard]] bool is_reserved_cpp_name(std::string_view name);

// The first byte of generated text that must not be there (a control byte other than newline and
// tab, or DEL), as its offset; nullopt when the text is clean. The emitter checks every file with
// it, so a piece of data that missed cpp_escaped is an internal error, never code.
[[nodiscard]] std::optional<size_t> find_raw_control_byte(std::string_view text);

}  // namespace autocastgen::emit
