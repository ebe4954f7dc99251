// Data into generated C++: the one escaping function, and the names the generator may declare.
#include "emit/cpp_text.h"

#include <algorithm>
#include <iterator>

namespace autocastgen::emit {

std::string cpp_escaped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  char previous = 0;
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '?' && previous == '?') {
      out += "\\?";
    } else if (c == '\n' || c == '\t' || c == '\r') {
      out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
    } else if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out.push_back(c);
    } else {  // a control byte, DEL, a byte of a multi-byte character, or the backslash
      out += '\\';
      out += static_cast<char>('0' + ((byte >> 6) & 7));
      out += static_cast<char>('0' + ((byte >> 3) & 7));
      out += static_cast<char>('0' + (byte & 7));
    }
    previous = c;
  }
  return out;
}

std::string cpp_string_literal(std::string_view bytes) { return "\"" + cpp_escaped(bytes) + "\""; }

namespace {

// C++20's keywords and alternative tokens, the contextual names of modules, and GNU's typeof.
constexpr std::string_view kKeywords[] = {
    "alignas",   "alignof",      "and",          "and_eq",    "asm",         "auto",         "bitand",
    "bitor",     "bool",         "break",        "case",      "catch",       "char",         "char8_t",
    "char16_t",  "char32_t",     "class",        "compl",     "concept",     "const",        "consteval",
    "constexpr", "constinit",    "const_cast",   "continue",  "co_await",    "co_return",    "co_yield",
    "decltype",  "default",      "delete",       "do",        "double",      "dynamic_cast", "else",
    "enum",      "explicit",     "export",       "extern",    "false",       "final",        "float",
    "for",       "friend",       "goto",         "if",        "import",      "inline",       "int",
    "long",      "module",       "mutable",      "namespace", "new",         "noexcept",     "not",
    "not_eq",    "nullptr",      "operator",     "or",        "or_eq",       "override",     "private",
    "protected", "public",       "register",     "reinterpret_cast", "requires", "return",   "short",
    "signed",    "sizeof",       "static",       "static_assert", "static_cast", "struct",   "switch",
    "template",  "this",         "thread_local", "throw",     "true",        "try",          "typedef",
    "typeid",    "typename",     "typeof",       "union",     "unsigned",    "using",        "virtual",
    "void",      "volatile",     "wchar_t",      "while",     "xor",         "xor_eq"};

// Lower-case macros of the C and POSIX headers that torch's headers include, and the names GCC
// predefines outside strict modes.
constexpr std::string_view kLowerCaseMacros[] = {"assert",   "errno",  "stdin",  "stdout",  "stderr", "major",
                                                 "minor",    "makedev", "offsetof", "setjmp", "va_arg", "va_start",
                                                 "va_end",   "va_copy", "linux",  "unix",    "i386",   "alloca"};

// Note [names in generated wrappers]
// A wrapper's parameters shadow, inside its body, every name the body uses: the namespaces it
// spells types and calls with, the file's constants, the local `lower_precision`, the dispatcher
// handles `<wrapper>_op()` and the module patterns `k<Name>Modules<n>` (templates/torch/).
constexpr std::string_view kGeneratedNames[] = {
    "rt", "State", "at", "c10", "std", "torch", "autocastgen", "kDevice", "kAutocastKey", "kFp8Recipe",
    "lower_precision", "int64_t", "m"};

bool is_upper_or_digit(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

bool is_reserved_cpp_name(std::string_view name) {
  const auto listed = [&](const auto& list) { return std::find(std::begin(list), std::end(list), name) != std::end(list); };
  if (listed(kKeywords) || listed(kLowerCaseMacros) || listed(kGeneratedNames)) return true;
  if (name.starts_with("__") || (name.size() >= 2 && name[0] == '_' && name[1] >= 'A' && name[1] <= 'Z'))
    return true;  // reserved to the implementation: __cplusplus, __linux__, _GLIBCXX_...
  if (name.size() >= 3 && std::any_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }) &&
      std::all_of(name.begin(), name.end(), is_upper_or_digit))
    return true;  // in the style of a macro (NULL, EOF, INT_MAX, TORCH_API; one or two letters are math: A, B, LU)
  if (name.ends_with("_op")) return true;
  return name.size() >= 2 && name[0] == 'k' && name[1] >= 'A' && name[1] <= 'Z';
}

std::string cpp_identifier(std::string_view name) {
  std::string out(name);
  // `__x_` is still reserved in name, but defined by no implementation: it differs from every
  // name the rule guards against, which is all a parameter or wrapper needs.
  if (is_reserved_cpp_name(name)) out += '_';
  return out;
}

std::optional<size_t> find_raw_control_byte(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) return i;
  }
  return std::nullopt;
}

}  // namespace autocastgen::emit
