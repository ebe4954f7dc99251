// Recursive-descent parser for the function-schema grammar; checks the rules torchgen enforces
// on argument order (one `*`, out arguments last) and names (no duplicates).
#include "schema/parser.h"

#include <charconv>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "schema/lexer.h"
#include "support/strings.h"

namespace autocastgen::schema {

namespace {

using model::Annotation;
using model::Argument;
using model::BaseTy;
using model::Return;
using model::Type;

constexpr std::string_view kCustomClassPrefix = "__torch__.torch.classes.";
// Real schemas nest two deep (`Tensor?[]`, `[[0, 1]]` would be three); the limits only keep
// adversarial input from recursing without bound.
constexpr int kMaxTypeSuffixes = 16;
constexpr int kMaxDefaultNesting = 16;

// How an unexpected character is named in a message: printable ASCII and UTF-8 as they are,
// other bytes as `\xNN`.
std::string printable(std::string_view text) {
  const auto c = static_cast<unsigned char>(text.front());
  if ((c >= 0x20 && c < 0x7F) || (c >= 0x80 && text.size() > 1 && text.size() == utf8_length(c))) return std::string(text);
  return fmt::format("\\x{:02X}", c);
}

// Thrown inside the parser only, caught at its entry point: keeps each step free of
// error-propagation noise. Exactly one error per schema is reported.
struct ParseError {
  uint32_t offset;
  uint32_t length;
  std::string message;
};

class Parser {
 public:
  Parser(std::string_view text) : lexer_(text) { advance(); }

  model::FunctionSchema parse(const SchemaSource& source) {
    source_ = &source;
    model::OperatorName name = parse_operator_name();
    expect(TokenKind::lparen, "'(' after the operator name");
    std::vector<Argument> arguments = parse_arguments();
    expect(TokenKind::rparen, "')' or ',' in the argument list");
    expect(TokenKind::arrow, "'->' after the argument list");
    std::vector<Return> returns = parse_returns();
    if (token_.kind != TokenKind::end) fail_here(fmt::format("unexpected {} after the returns", describe(token_.kind)));
    return model::FunctionSchema(std::move(name), std::move(arguments), std::move(returns), source.start);
  }

 private:
  void advance() {
    previous_end_ = token_.offset + static_cast<uint32_t>(token_.text.size());
    token_ = lexer_.next();
    if (token_.kind == TokenKind::error) {
      if (token_.text[0] == '\'' || token_.text[0] == '"') fail(token_.offset, 1, "unterminated string literal");
      fail(token_.offset, static_cast<uint32_t>(token_.text.size()),
           fmt::format("unexpected character '{}' in schema", printable(token_.text)));
    }
  }

  [[noreturn]] void fail(uint32_t offset, uint32_t length, std::string message) {
    throw ParseError{offset, length, std::move(message)};
  }
  [[noreturn]] void fail_here(std::string message) {
    fail(token_.offset, std::max<uint32_t>(1, static_cast<uint32_t>(token_.text.size())), std::move(message));
  }

  void expect(TokenKind kind, std::string_view what) {
    if (token_.kind != kind) fail_here(fmt::format("expected {}, found {}", what, found()));
    advance();
  }

  std::string found() const {
    if (token_.kind == TokenKind::end) return "end of schema";
    return fmt::format("'{}'", token_.text);
  }

  bool accept(TokenKind kind) {
    if (token_.kind != kind) return false;
    advance();
    return true;
  }

  SourceLocation loc(uint32_t offset) const { return source_->at(offset); }

  std::string_view expect_identifier(std::string_view what) {
    if (token_.kind != TokenKind::identifier) fail_here(fmt::format("expected {}, found {}", what, found()));
    const std::string_view text = token_.text;
    advance();
    return text;
  }

  // With the current token a '.': the `[A-Za-z0-9_]+` right after it, then advances past it.
  std::string_view expect_word(std::string_view what) {
    token_ = lexer_.word();
    if (token_.text.empty()) {
      advance();
      fail_here(fmt::format("expected {} right after '.', found {}", what, found()));
    }
    const std::string_view word = token_.text;
    advance();
    return word;
  }

  model::OperatorName parse_operator_name() {
    model::OperatorName name;
    name.location = loc(token_.offset);
    uint32_t name_offset = token_.offset;
    std::string_view first = expect_identifier("an operator name");
    if (accept(TokenKind::colon_colon)) {
      name.ns = std::string(first);
      name.location = loc(token_.offset);
      name_offset = token_.offset;
      first = expect_identifier("an operator name after '::'");
    }
    name.name = std::string(first);
    if (name.name.ends_with("_out"))
      fail(name_offset, static_cast<uint32_t>(first.size()),
           "operator names may not end in '_out'; write an 'out' overload instead");
    if (token_.kind == TokenKind::dot) {
      // Overload names are letters, digits and '_' (they may start with a digit).
      name.overload_location = loc(token_.offset + 1);
      name.overload = std::string(expect_word("an overload name"));
    }
    return name;
  }

  // `letter ('|' letter)* '!'? ('->' ('*' | letter ('|' letter)*))?` between parentheses.
  Annotation parse_annotation() {
    Annotation annotation;
    auto letter = [&](std::vector<char>& into, bool allow_wildcard) {
      if (allow_wildcard && accept(TokenKind::star)) {
        into.push_back('*');
        return;
      }
      if (token_.kind != TokenKind::identifier || token_.text.size() != 1 || token_.text[0] < 'a' ||
          token_.text[0] > 'z')
        fail_here(fmt::format("expected a lower-case alias letter in the annotation, found {}", found()));
      into.push_back(token_.text[0]);
      advance();
    };
    const uint32_t start = token_.offset;
    letter(annotation.alias_set, false);
    while (accept(TokenKind::pipe)) letter(annotation.alias_set, false);
    annotation.is_write = accept(TokenKind::bang);
    if (accept(TokenKind::arrow)) {
      letter(annotation.alias_set_after, true);
      while (annotation.alias_set_after.back() != '*' && accept(TokenKind::pipe)) letter(annotation.alias_set_after, false);
    }
    if (annotation.is_write && annotation.alias_set.size() > 1)
      fail(start, token_.offset - start, "a written alias annotation ('!') must name a single alias set");
    if (annotation.alias_set.size() > 1 && annotation.alias_set_after.size() > 1)
      fail(start, token_.offset - start, "an annotation may not have alias sets both before and after '->'");
    return annotation;
  }

  struct AnnotatedType {
    Type type;
    std::optional<Annotation> annotation;
  };

  AnnotatedType parse_type() {
    const uint32_t start = token_.offset;
    if (token_.kind != TokenKind::identifier) fail_here(fmt::format("expected a type, found {}", found()));
    std::string spelled(token_.text);
    advance();
    std::optional<Type> type;
    if (spelled == "__torch__") {
      // `__torch__.torch.classes.<ns>.<Class>`
      while (token_.kind == TokenKind::dot) {
        spelled += ".";
        spelled += expect_word("a class path component");
      }
      if (!spelled.starts_with(kCustomClassPrefix) || spelled.size() == kCustomClassPrefix.size())
        fail(start, previous_end_ - start, fmt::format("'{}' is not a custom class type (__torch__.torch.classes.NS.NAME)", spelled));
      type = Type::custom_class(spelled.substr(kCustomClassPrefix.size()));
    } else if (auto base = model::parse_base_ty(spelled)) {
      type = Type::base(*base);
    } else {
      static const std::vector<std::string_view> known(model::base_ty_spellings().begin(),
                                                       model::base_ty_spellings().end());
      std::string suggestion = closest_match(spelled, known);
      fail(start, static_cast<uint32_t>(spelled.size()),
           suggestion.empty() ? fmt::format("unknown type '{}'", spelled)
                              : fmt::format("unknown type '{}'; did you mean '{}'?", spelled, suggestion));
    }
    std::optional<Annotation> annotation;
    if (token_.kind == TokenKind::lparen && type->is_base(BaseTy::Tensor)) {
      advance();
      annotation = parse_annotation();
      expect(TokenKind::rparen, "')' after the alias annotation");
    }
    for (int suffixes = 0;; ++suffixes) {
      if ((token_.kind == TokenKind::question || token_.kind == TokenKind::lbracket) && suffixes == kMaxTypeSuffixes)
        fail_here(fmt::format("a type may have at most {} '?' and '[]' suffixes", kMaxTypeSuffixes));
      if (accept(TokenKind::question)) {
        type = Type::optional(*type);
      } else if (token_.kind == TokenKind::lbracket) {
        advance();
        std::optional<uint32_t> size;
        if (token_.kind == TokenKind::number) {
          // torchgen prints `int[0]` as `int[]` and `int[01]` as `int[1]`: only the canonical
          // spelling of a positive size round-trips.
          const std::string_view digits = token_.text;
          uint32_t value = 0;
          const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
          if (digits[0] == '0' || digits[0] == '-' || end != digits.data() + digits.size() ||
              error != std::errc())
            fail_here(fmt::format("list size must be a positive integer without leading zeros, found '{}'", digits));
          size = value;
          advance();
        }
        expect(TokenKind::rbracket, "']' to close the list type");
        type = Type::list(*type, size);
      } else {
        break;
      }
    }
    if (annotation) {
      // torchgen only accepts annotations on Tensor, Tensor? and Tensor[].
      const bool plain = type->is_base(BaseTy::Tensor);
      const bool wrapped = (type->kind() == Type::Kind::optional || (type->kind() == Type::Kind::list && !type->size())) &&
                           type->elem().is_base(BaseTy::Tensor);
      if (!plain && !wrapped)
        fail(start, previous_end_ - start,
             fmt::format("alias annotations are allowed on Tensor, Tensor? and Tensor[] only, not '{}'", type->str()));
    }
    return {*type, annotation};
  }

  // A default value: number, string, identifier (None, True, contiguous_format, ...), `-inf`, or a
  // bracketed list of those. Kept as written.
  void parse_default_value(int depth = 0) {
    if (token_.kind == TokenKind::lbracket) {
      if (depth == kMaxDefaultNesting)
        fail_here(fmt::format("default values may nest at most {} lists deep", kMaxDefaultNesting));
      advance();
      if (!accept(TokenKind::rbracket)) {
        do parse_default_value(depth + 1);
        while (accept(TokenKind::comma));
        expect(TokenKind::rbracket, "']' or ',' in the default list");
      }
      return;
    }
    if (token_.kind == TokenKind::minus) {
      advance();
      if (token_.kind != TokenKind::identifier) fail_here(fmt::format("expected a number or identifier after '-', found {}", found()));
      advance();
      return;
    }
    if (token_.kind == TokenKind::number || token_.kind == TokenKind::string || token_.kind == TokenKind::identifier) {
      advance();
      return;
    }
    fail_here(fmt::format("expected a default value, found {}", found()));
  }

  std::vector<Argument> parse_arguments() {
    std::vector<Argument> arguments;
    if (token_.kind == TokenKind::rparen) return arguments;
    bool kwarg_only = false;
    bool in_out = false;
    std::optional<uint32_t> star_offset;
    std::unordered_map<std::string_view, size_t> names;
    do {
      if (token_.kind == TokenKind::star) {
        if (kwarg_only) fail_here("the keyword-only marker '*' may appear only once");
        star_offset = token_.offset;
        kwarg_only = true;
        advance();
        if (token_.kind != TokenKind::comma && token_.kind != TokenKind::rparen)
          fail_here(fmt::format("expected ',' after '*', found {}", found()));
        continue;
      }
      const SourceLocation type_location = loc(token_.offset);
      const uint32_t type_start = token_.offset;
      AnnotatedType annotated = parse_type();
      Argument argument{std::move(annotated.type), std::move(annotated.annotation), {}, std::nullopt,
                        false, false, type_location, loc(token_.offset)};
      const uint32_t name_offset = token_.offset;
      if (token_.kind != TokenKind::identifier)
        fail_here(fmt::format("expected an argument name after '{}', found {}",
                              lexer_.text().substr(type_start, previous_end_ - type_start), found()));
      const std::string_view name = expect_identifier("an argument name");
      argument.name = std::string(name);
      if (auto [it, inserted] = names.emplace(name, arguments.size()); !inserted)
        fail(name_offset, static_cast<uint32_t>(name.size()), fmt::format("duplicate argument name '{}'", name));
      if (accept(TokenKind::equals)) {
        const uint32_t value_start = token_.offset;
        parse_default_value();
        argument.default_value = std::string(lexer_.text().substr(value_start, previous_end_ - value_start));
      }
      argument.kwarg_only = kwarg_only;
      // Written keyword-only arguments are out arguments, and they come last (torchgen's rule).
      if (kwarg_only && argument.is_write()) {
        in_out = true;
      } else if (in_out) {
        fail(type_start, previous_end_ - type_start,
             fmt::format("keyword-only argument '{}' follows an out argument; out arguments must come last", name));
      }
      argument.out = in_out;
      arguments.push_back(std::move(argument));
    } while (accept(TokenKind::comma));
    if (star_offset && (arguments.empty() || !arguments.back().kwarg_only))
      fail(*star_offset, 1, "'*' must be followed by at least one keyword-only argument");
    return arguments;
  }

  Return parse_return() {
    const SourceLocation location = loc(token_.offset);
    AnnotatedType annotated = parse_type();
    Return result{std::move(annotated.type), std::move(annotated.annotation), std::nullopt, location};
    if (token_.kind == TokenKind::identifier) {
      result.name = std::string(token_.text);
      advance();
    }
    return result;
  }

  std::vector<Return> parse_returns() {
    std::vector<Return> returns;
    if (!accept(TokenKind::lparen)) {
      returns.push_back(parse_return());
      return returns;
    }
    if (accept(TokenKind::rparen)) return returns;
    do returns.push_back(parse_return());
    while (accept(TokenKind::comma));
    expect(TokenKind::rparen, "')' or ',' in the returns");
    return returns;
  }

  Lexer lexer_;
  Token token_{TokenKind::end, 0, {}};
  uint32_t previous_end_ = 0;
  const SchemaSource* source_ = nullptr;
};

}  // namespace

std::optional<model::FunctionSchema> parse_function_schema(std::string_view text, const SchemaSource& source,
                                                           DiagnosticEngine& diags) {
  try {
    Parser parser(text);
    return parser.parse(source);
  } catch (const ParseError& e) {
    diags.error(source.at(e.offset), e.message, source.offsets_exact ? e.length : 1);
    return std::nullopt;
  }
}

}  // namespace autocastgen::schema
