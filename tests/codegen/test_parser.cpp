// The schema parser: every grammar feature, the parsed model, canonical printing, locations, and
// a table of malformed schemas with the one `line:col: error: text` each must give.
#include <gtest/gtest.h>

#include "model/type.h"
#include "schema_test_util.h"

namespace autocastgen {
namespace {

using model::BaseTy;
using model::Type;
using testing_support::parse_schema;

model::FunctionSchema must_parse(const std::string& text) {
  auto parsed = parse_schema(text);
  if (!parsed.schema) ADD_FAILURE() << text << "\n" << parsed.diagnostics;
  return std::move(parsed.schema).value();
}

// Canonical schemas (as torchgen prints them) print back byte for byte.
TEST(Parser, CanonicalSchemasRoundTrip) {
  const char* schemas[] = {
      "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
      "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
      "myops::my_op.v2(Tensor x) -> Tensor",
      "upsample.2d(Tensor x) -> Tensor",
      "f(Generator a, ScalarType b, Tensor c, int d, DimVector e, float f, str g, bool h, Layout i, Device j, "
      "DeviceIndex k, Scalar l, MemoryFormat m, QScheme n, Storage o, Stream p, SymInt q, SymBool r, GraphModule s) -> ()",
      "f(Tensor? a, Tensor[] b, Tensor?[] c, int[] d, int[2] e, SymInt[3] f, int[]? g, bool[3] h, int[1]? i, "
      "float[]? j, Scalar[] k, Tensor?? l) -> ()",
      "f(Tensor(a) x, Tensor(a!) y, Tensor(a|b) z, Tensor(a -> *) w, Tensor(a! -> a|b) v, Tensor(a|b -> c) u) -> ()",
      // Named tensors (every release up to 2.12).
      "softmax.Dimname(Tensor self, Dimname dim, *, ScalarType? dtype=None) -> Tensor",
      "f(Dimname a, Dimname[] b, Dimname? c, Dimname[]? d, Dimname[1] e) -> ()",
      "f(Tensor(a)? x, Tensor(a!)[] y, Tensor(b!)? z) -> (Tensor(a), Tensor(a!)[])",
      "f(Tensor x, *, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!) values, Tensor(b!) indices)",
      "f(*, int x) -> Tensor",
      "f() -> Tensor",
      "f(Tensor x) -> ()",
      "f(Tensor x) -> Tensor[]",
      "f(Tensor x) -> (Tensor, Tensor, int)",
      "f(Tensor x) -> (Tensor values, Tensor indices)",
      "f(Tensor x) -> Tensor y",
      "f(Tensor? a=None, bool b=True, bool c=False, int d=1, int e=-1, float f=0.5, float g=1e-05, "
      "float h=-inf, float i=inf, int[] j=[], int[2] k=[-2, -1], int[1] l=[0], str m=\"mean\", str n='linear', "
      "MemoryFormat o=contiguous_format, int p=Mean, ScalarType q=long, str r='\"\\'\\\\', str s=\"\\\"'\\\\\", "
      "str t=\"\", float u=0.3333333333333333, int[] v=[[0, 1], []]) -> ()",
      "f(__torch__.torch.classes.quantized.Conv2dPackedParamsBase packed, Tensor x) -> "
      "__torch__.torch.classes.quantized.Conv2dPackedParamsBase",
      "__iand__.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
      "_foo__(Tensor(a!) self) -> Tensor(a!)",
  };
  for (const char* text : schemas) EXPECT_EQ(must_parse(text).str(), text);
}

// Non-canonical spacing and a parenthesised single return print in canonical form.
TEST(Parser, PrintsCanonicalForm) {
  struct Case { const char* input; const char* canonical; };
  const Case cases[] = {
      {"f( Tensor  x ,int y=1 )->( Tensor )", "f(Tensor x, int y=1) -> Tensor"},
      {"aten :: f .o (Tensor ( a ! ) x)->()", "aten::f.o(Tensor(a!) x) -> ()"},
      {"f(Tensor x,*,int y)->(Tensor a,Tensor b)", "f(Tensor x, *, int y) -> (Tensor a, Tensor b)"},
      {"f(Tensor(a->*) x) -> Tensor(a  |b)", "f(Tensor(a -> *) x) -> Tensor(a|b)"},
      {"f(int[] x=[1,2]) -> ()", "f(int[] x=[1,2]) -> ()"},  // defaults are kept as written
      {"\n f(Tensor\tx)\n -> Tensor\n", "f(Tensor x) -> Tensor"},
  };
  for (const Case& c : cases) EXPECT_EQ(must_parse(c.input).str(), c.canonical) << c.input;
}

TEST(Parser, OperatorNames) {
  const auto plain = must_parse("add.Tensor(Tensor self) -> Tensor");
  EXPECT_EQ(plain.name().ns, "");
  EXPECT_EQ(plain.name().name, "add");
  EXPECT_EQ(plain.name().overload, "Tensor");
  EXPECT_EQ(plain.name().unqualified(), "add.Tensor");
  EXPECT_EQ(plain.name().str(), "add.Tensor");
  const auto custom = must_parse("my_ns::op(Tensor self) -> Tensor");
  EXPECT_EQ(custom.name().ns, "my_ns");
  EXPECT_EQ(custom.name().name, "op");
  EXPECT_EQ(custom.name().overload, "");
  EXPECT_EQ(custom.name().unqualified(), "op");
  EXPECT_EQ(custom.name().str(), "my_ns::op");
  EXPECT_EQ(must_parse("f.2d(Tensor self) -> Tensor").name().overload, "2d");
  EXPECT_EQ(must_parse("f._x9(Tensor self) -> Tensor").name().overload, "_x9");
}

TEST(Parser, ArgumentsAndTypes) {
  const auto s = must_parse(
      "f(Tensor(a!) self, Tensor?[] indices, int[]? sizes=None, SymInt[2] pad=0, *, ScalarType? dtype=None, "
      "Tensor(b!) out) -> Tensor(b!)");
  const auto& args = s.arguments();
  ASSERT_EQ(args.size(), 6u);

  EXPECT_EQ(args[0].name, "self");
  EXPECT_TRUE(args[0].type.is_base(BaseTy::Tensor));
  ASSERT_TRUE(args[0].annotation.has_value());
  EXPECT_EQ(args[0].annotation->alias_set, std::vector<char>{'a'});
  EXPECT_TRUE(args[0].annotation->is_write);
  EXPECT_TRUE(args[0].is_write());
  EXPECT_FALSE(args[0].kwarg_only);
  EXPECT_FALSE(args[0].out);

  // Tensor?[]: a list of optional tensors.
  EXPECT_EQ(args[1].type.kind(), Type::Kind::list);
  EXPECT_EQ(args[1].type.elem().kind(), Type::Kind::optional);
  EXPECT_TRUE(args[1].type.elem().elem().is_base(BaseTy::Tensor));
  EXPECT_FALSE(args[1].type.size().has_value());
  EXPECT_TRUE(args[1].type.is_tensor_like());
  EXPECT_EQ(args[1].type.str(), "Tensor?[]");

  // int[]?: an optional list.
  EXPECT_EQ(args[2].type.kind(), Type::Kind::optional);
  EXPECT_EQ(args[2].type.elem().kind(), Type::Kind::list);
  EXPECT_TRUE(args[2].type.elem().elem().is_base(BaseTy::Int));
  EXPECT_FALSE(args[2].type.is_tensor_like());
  EXPECT_EQ(args[2].default_value, "None");

  EXPECT_EQ(args[3].type.size(), 2u);
  EXPECT_TRUE(args[3].type.elem().is_base(BaseTy::SymInt));
  EXPECT_EQ(args[3].default_value, "0");

  EXPECT_TRUE(args[4].kwarg_only);
  EXPECT_FALSE(args[4].out);
  EXPECT_TRUE(args[4].type.is_optional_scalar_type());
  EXPECT_FALSE(args[4].annotation.has_value());

  EXPECT_TRUE(args[5].kwarg_only);
  EXPECT_TRUE(args[5].out);
  EXPECT_EQ(args[5].type_str(), "Tensor(b!)");
  EXPECT_EQ(args[5].str(), "Tensor(b!) out");

  EXPECT_EQ(s.find_argument("dtype"), &args[4]);
  EXPECT_EQ(s.find_argument("nothing"), nullptr);
  ASSERT_EQ(s.returns().size(), 1u);
  EXPECT_EQ(s.returns()[0].annotation, args[5].annotation);
  EXPECT_FALSE(s.returns()[0].name.has_value());
}

TEST(Parser, AliasAnnotations) {
  const auto s = must_parse("f(Tensor(a) x, Tensor(a|b) y, Tensor(a -> *) z, Tensor(b! -> b|c) w) -> ()");
  const auto& a = s.arguments();
  EXPECT_EQ(a[0].annotation->str(), "a");
  EXPECT_FALSE(a[0].annotation->is_write);
  EXPECT_EQ(a[1].annotation->alias_set, (std::vector<char>{'a', 'b'}));
  EXPECT_EQ(a[2].annotation->alias_set_after, std::vector<char>{'*'});
  EXPECT_EQ(a[2].annotation->str(), "a -> *");
  EXPECT_TRUE(a[3].annotation->is_write);
  EXPECT_EQ(a[3].annotation->alias_set_after, (std::vector<char>{'b', 'c'}));
  EXPECT_EQ(a[3].annotation->str(), "b! -> b|c");
}

TEST(Parser, Returns) {
  EXPECT_TRUE(must_parse("f(Tensor x) -> ()").returns().empty());
  const auto named = must_parse("f(Tensor x) -> (Tensor values, int[] sizes, Tensor)");
  ASSERT_EQ(named.returns().size(), 3u);
  EXPECT_EQ(named.returns()[0].name, "values");
  EXPECT_EQ(named.returns()[1].type.str(), "int[]");
  EXPECT_EQ(named.returns()[1].str(), "int[] sizes");
  EXPECT_FALSE(named.returns()[2].name.has_value());
  const auto custom = must_parse("f(Tensor x) -> __torch__.torch.classes.ns.Cls");
  EXPECT_EQ(custom.returns()[0].type.kind(), Type::Kind::custom_class);
  EXPECT_EQ(custom.returns()[0].type.class_name(), "ns.Cls");
}

TEST(Parser, DefaultsAreKeptAsWritten) {
  const auto s = must_parse(
      "f(float a=-inf, str b=\"a\\\"b\", str c='x\\\\', int[] d=[-2, -1], int[] e=[[1], [2, 3]], float f=1e-05, "
      "int g=-100, str h=\"\") -> ()");
  const char* expected[] = {"-inf", "\"a\\\"b\"", "'x\\\\'", "[-2, -1]", "[[1], [2, 3]]", "1e-05", "-100", "\"\""};
  ASSERT_EQ(s.arguments().size(), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) EXPECT_EQ(s.arguments()[i].default_value, expected[i]);
}

TEST(Parser, LocationsPointIntoTheBuffer) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const std::string text = "- func: ns::f.o(Tensor self, int[] dim) -> Tensor";
  const uint32_t file = sm.add_buffer("x.yaml", text);
  const uint32_t start = static_cast<uint32_t>(text.find("ns::"));
  auto s = schema::parse_function_schema(text.substr(start), schema::SchemaSource{{file, start}}, diags);
  ASSERT_TRUE(s) << out.str();
  EXPECT_EQ(s->location().offset, start);
  EXPECT_EQ(s->name().location.offset, text.find("f.o"));
  EXPECT_EQ(s->name().overload_location.offset, text.find("o("));
  EXPECT_EQ(s->arguments()[1].location.offset, text.find("int[]"));
  EXPECT_EQ(s->arguments()[1].name_location.offset, text.find("dim"));
  EXPECT_EQ(s->returns()[0].location.offset, text.rfind("Tensor"));
  EXPECT_EQ(sm.line_column(s->arguments()[1].name_location).column, text.find("dim") + 1);

  // Inexact sources (escaped YAML scalars) map every offset to the start.
  auto inexact = schema::parse_function_schema("f(Tensor x) -> Tensor", schema::SchemaSource{{file, 2}, false}, diags);
  ASSERT_TRUE(inexact);
  EXPECT_EQ(inexact->arguments()[0].name_location.offset, 2u);
  auto bad = schema::parse_function_schema("f(Tensr x) -> Tensor", schema::SchemaSource{{file, 2}, false}, diags);
  EXPECT_FALSE(bad);
  EXPECT_EQ(diags.diagnostics().back().location.offset, 2u);
  EXPECT_EQ(diags.diagnostics().back().length, 1u);
}

// ---- Errors: (schema, the one diagnostic it gives) -----------------------------------------------

struct ErrorCase {
  std::string schema;
  std::string expected;  // `line:col: error: message`
};

const ErrorCase kErrors[] = {
    // Names
    {"(Tensor a) -> ()", "1:1: error: expected an operator name, found '('"},
    {"aten::(Tensor a) -> ()", "1:7: error: expected an operator name after '::', found '('"},
    {"foo_out(Tensor a) -> Tensor", "1:1: error: operator names may not end in '_out'; write an 'out' overload instead"},
    {"ns::foo_out.x(Tensor a) -> Tensor",
     "1:5: error: operator names may not end in '_out'; write an 'out' overload instead"},
    {"foo.(Tensor a) -> ()", "1:5: error: expected an overload name right after '.', found '('"},
    {"foo. bar(Tensor a) -> ()", "1:6: error: expected an overload name right after '.', found 'bar'"},
    {"foo.-1(Tensor a) -> ()", "1:5: error: expected an overload name right after '.', found '-1'"},
    {"foo Tensor a) -> ()", "1:5: error: expected '(' after the operator name, found 'Tensor'"},
    // Types
    {"foo(Tensr x) -> Tensor", "1:5: error: unknown type 'Tensr'; did you mean 'Tensor'?"},
    {"foo(Tensor x) -> Tensorr", "1:18: error: unknown type 'Tensorr'; did you mean 'Tensor'?"},
    {"foo(SymInts x) -> ()", "1:5: error: unknown type 'SymInts'; did you mean 'SymInt'?"},
    {"foo(Blob x) -> ()", "1:5: error: unknown type 'Blob'"},
    {"foo(Dimnames x) -> ()", "1:5: error: unknown type 'Dimnames'; did you mean 'Dimname'?"},
    {"foo(tensor x) -> ()", "1:5: error: unknown type 'tensor'; did you mean 'Tensor'?"},
    {"foo(int[0] x) -> ()", "1:9: error: list size must be a positive integer without leading zeros, found '0'"},
    {"foo(int[01] x) -> ()", "1:9: error: list size must be a positive integer without leading zeros, found '01'"},
    {"foo(int[2.5] x) -> ()", "1:9: error: list size must be a positive integer without leading zeros, found '2.5'"},
    {"foo(int[-1] x) -> ()", "1:9: error: list size must be a positive integer without leading zeros, found '-1'"},
    {"foo(int[99999999999] x) -> ()",
     "1:9: error: list size must be a positive integer without leading zeros, found '99999999999'"},
    {"foo(int[n] x) -> ()", "1:9: error: expected ']' to close the list type, found 'n'"},
    {"foo(int[ x) -> ()", "1:10: error: expected ']' to close the list type, found 'x'"},
    {"foo(__torch__.foo.Bar x) -> ()",
     "1:5: error: '__torch__.foo.Bar' is not a custom class type (__torch__.torch.classes.NS.NAME)"},
    {"foo(__torch__.torch.classes x) -> ()",
     "1:5: error: '__torch__.torch.classes' is not a custom class type (__torch__.torch.classes.NS.NAME)"},
    {"foo(__torch__.torch.classes. x) -> ()", "1:30: error: expected a class path component right after '.', found 'x'"},
    {"foo(__torch__.torch.classes.ns.) -> ()", "1:32: error: expected a class path component right after '.', found ')'"},
    {"foo(Tensor" + std::string(17, '?') + " x) -> ()", "1:27: error: a type may have at most 16 '?' and '[]' suffixes"},
    // Annotations
    {"foo(Tensor(A) x) -> ()", "1:12: error: expected a lower-case alias letter in the annotation, found 'A'"},
    {"foo(Tensor(ab) x) -> ()", "1:12: error: expected a lower-case alias letter in the annotation, found 'ab'"},
    {"foo(Tensor() x) -> ()", "1:12: error: expected a lower-case alias letter in the annotation, found ')'"},
    {"foo(Tensor(a|) x) -> ()", "1:14: error: expected a lower-case alias letter in the annotation, found ')'"},
    {"foo(Tensor(a -> ) x) -> ()", "1:17: error: expected a lower-case alias letter in the annotation, found ')'"},
    {"foo(Tensor(a!!) x) -> ()", "1:14: error: expected ')' after the alias annotation, found '!'"},
    {"foo(Tensor(a x) -> ()", "1:14: error: expected ')' after the alias annotation, found 'x'"},
    {"foo(Tensor(a|b!) x) -> ()", "1:12: error: a written alias annotation ('!') must name a single alias set"},
    {"foo(Tensor(a|b -> c|d) x) -> ()",
     "1:12: error: an annotation may not have alias sets both before and after '->'"},
    {"foo(Tensor(a)[3] x) -> ()",
     "1:5: error: alias annotations are allowed on Tensor, Tensor? and Tensor[] only, not 'Tensor[3]'"},
    {"foo(Tensor(a)?[] x) -> ()",
     "1:5: error: alias annotations are allowed on Tensor, Tensor? and Tensor[] only, not 'Tensor?[]'"},
    {"foo(int(a) x) -> ()", "1:8: error: expected an argument name after 'int', found '('"},
    {"foo(Tensor?(a) x) -> ()", "1:12: error: expected an argument name after 'Tensor?', found '('"},
    // Argument list
    {"foo(Tensor x -> Tensor", "1:14: error: expected ')' or ',' in the argument list, found '->'"},
    {"foo(Tensor x)) -> Tensor", "1:14: error: expected '->' after the argument list, found ')'"},
    {"foo(Tensor x) Tensor", "1:15: error: expected '->' after the argument list, found 'Tensor'"},
    {"foo(Tensor x)", "1:14: error: expected '->' after the argument list, found end of schema"},
    {"foo(Tensor x,) -> ()", "1:14: error: expected a type, found ')'"},
    {"foo(Tensor) -> ()", "1:11: error: expected an argument name after 'Tensor', found ')'"},
    {"foo(Tensor(a!)[] ) -> ()", "1:18: error: expected an argument name after 'Tensor(a!)[]', found ')'"},
    {"foo(Tensor a, int a) -> ()", "1:19: error: duplicate argument name 'a'"},
    {"foo(Tensor a, *, int b, *, int c) -> ()", "1:25: error: the keyword-only marker '*' may appear only once"},
    {"foo(Tensor a, *) -> ()", "1:15: error: '*' must be followed by at least one keyword-only argument"},
    {"foo(*) -> ()", "1:5: error: '*' must be followed by at least one keyword-only argument"},
    {"foo(* Tensor a) -> ()", "1:7: error: expected ',' after '*', found 'Tensor'"},
    {"foo(Tensor a, *=1) -> ()", "1:16: error: expected ',' after '*', found '='"},
    {"foo.out(Tensor a, *, Tensor(a!) out, int b) -> Tensor(a!)",
     "1:38: error: keyword-only argument 'b' follows an out argument; out arguments must come last"},
    {"foo.out(Tensor a, *, Tensor(a!) out, Tensor(b) other) -> Tensor(a!)",
     "1:38: error: keyword-only argument 'other' follows an out argument; out arguments must come last"},
    // Defaults
    {"foo(int a=) -> ()", "1:11: error: expected a default value, found ')'"},
    {"foo(int a=,) -> ()", "1:11: error: expected a default value, found ','"},
    {"foo(int a=-) -> ()", "1:12: error: expected a number or identifier after '-', found ')'"},
    {"foo(int a=- 'x') -> ()", "1:13: error: expected a number or identifier after '-', found ''x''"},
    {"foo(int[] a=[1, 2) -> ()", "1:18: error: expected ']' or ',' in the default list, found ')'"},
    {"foo(int[] a=[1,) -> ()", "1:16: error: expected a default value, found ')'"},
    {"foo(int a=1 2) -> ()", "1:13: error: expected ')' or ',' in the argument list, found '2'"},
    {"foo(int a==1) -> ()", "1:11: error: expected a default value, found '='"},
    {"foo(str a=\"abc) -> ()", "1:11: error: unterminated string literal"},
    {"foo(str a='abc\\') -> ()", "1:11: error: unterminated string literal"},
    {"foo(str a=')", "1:11: error: unterminated string literal"},
    {"foo(str a=\")", "1:11: error: unterminated string literal"},
    {"foo(int[] a=" + std::string(17, '[') + std::string(17, ']') + ") -> ()",
     "1:29: error: default values may nest at most 16 lists deep"},
    // Returns and trailing text
    {"foo(Tensor x) ->", "1:17: error: expected a type, found end of schema"},
    {"foo(Tensor x) -> (Tensor, Tensor", "1:33: error: expected ')' or ',' in the returns, found end of schema"},
    {"foo(Tensor x) -> (Tensor,)", "1:26: error: expected a type, found ')'"},
    {"foo(Tensor x) -> Tensor a b", "1:27: error: unexpected identifier after the returns"},
    {"foo(Tensor x) -> () ()", "1:21: error: unexpected '(' after the returns"},
    {"foo(Tensor x) -> Tensor(a!)!", "1:28: error: unexpected '!' after the returns"},
    // Characters
    {"foo(Tensor x) -> Tensor $", "1:25: error: unexpected character '$' in schema"},
    {"foo(Tensor x): Tensor", "1:14: error: unexpected character ':' in schema"},
    {"foo(Tensor \xC3\xA9) -> ()", "1:12: error: unexpected character '\xC3\xA9' in schema"},
    {"foo(Tensor \x01x) -> ()", "1:12: error: unexpected character '\\x01' in schema"},
    {"foo(Tensor \xC3x) -> ()", "1:12: error: unexpected character '\\xC3' in schema"},
    {"", "1:1: error: expected an operator name, found end of schema"},
};

TEST(ParserErrors, Table) {
  for (const ErrorCase& c : kErrors) {
    const auto parsed = parse_schema(c.schema);
    EXPECT_FALSE(parsed.schema.has_value()) << c.schema;
    EXPECT_EQ(parsed.errors, 1u) << c.schema;
    EXPECT_EQ(parsed.first_line(), c.expected) << c.schema;
  }
}

TEST(ParserErrors, CaretUnderlinesTheOffendingToken) {
  struct Case { const char* schema; size_t column, length; };
  const Case cases[] = {
      {"foo(Tensr x) -> Tensor", 5, 5},
      {"foo_out(Tensor a) -> Tensor", 1, 7},
      {"foo(Tensor a, int a) -> ()", 19, 1},
      {"foo(Tensor(a|b!) x) -> ()", 12, 4},                                  // a|b!
      {"foo(Tensor(a)[3] x) -> ()", 5, 12},                                  // Tensor(a)[3]
      {"foo.out(Tensor a, *, Tensor(a!) out, int b) -> Tensor(a!)", 38, 5},  // int b
      {"foo(Tensor x) -> Tensor a b", 27, 1},
      {"foo(int[99999999999] x) -> ()", 9, 11},
      {"foo(__torch__.torch.cls.A x) -> ()", 5, 21},                         // the whole path
      {"foo(Tensor \xC3\xA9) -> ()", 12, 2},                                 // both bytes of the character
      {"foo(Tensor x)", 14, 1},                                              // end of schema
      {"foo(str a='abc) -> ()", 11, 1},
  };
  for (const Case& c : cases) {
    const auto parsed = parse_schema(c.schema);
    const std::string& d = parsed.diagnostics;
    const size_t second = d.find('\n') + 1;
    const size_t third = d.find('\n', second) + 1;
    EXPECT_EQ(d.substr(second, third - second - 1), c.schema);
    EXPECT_EQ(d.substr(third), std::string(c.column - 1, ' ') + "^" + std::string(c.length - 1, '~') + "\n") << c.schema;
  }
}

}  // namespace
}  // namespace autocastgen
