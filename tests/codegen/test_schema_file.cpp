// Schema files (native_functions.yaml format) into a SchemaSet: order, lookups, duplicates, errors.
#include <sstream>

#include <gtest/gtest.h>

#include "model/schema_set.h"
#include "schema/schema_file.h"

namespace autocastgen {
namespace {

struct Loaded {
  std::optional<model::SchemaSet> set;
  std::string diagnostics;
  size_t errors = 0;
};

Loaded load(const std::vector<std::pair<std::string, std::string>>& files) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  std::vector<uint32_t> ids;
  for (const auto& [name, text] : files) ids.push_back(sm.add_buffer(name, text));
  Loaded loaded;
  loaded.set = schema::load_schema_files(ids, sm, diags);
  loaded.diagnostics = out.str();
  loaded.errors = diags.error_count();
  return loaded;
}

Loaded load(const std::string& text) { return load({{"s.yaml", text}}); }

const char* const kFile = R"(# a few schemas
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  variants: function, method
  dispatch:
    CPU: add_cpu
- func: add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
- func: "mm(Tensor self, Tensor mat2) -> Tensor"
- func: 'add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)'
- func: relu(Tensor self) -> Tensor
  tags: [core, pointwise]
- func: myops::relu(Tensor self) -> Tensor
- func: add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
)";

TEST(SchemaFile, LoadsInDeclarationOrder) {
  const Loaded l = load(kFile);
  ASSERT_TRUE(l.set) << l.diagnostics;
  EXPECT_EQ(l.diagnostics, "");
  std::vector<std::string> names;
  for (const model::FunctionSchema& s : l.set->schemas()) names.push_back(s.name().str());
  EXPECT_EQ(names, (std::vector<std::string>{"add.Tensor", "add_.Tensor", "mm", "add.out", "relu", "myops::relu",
                                             "add.Scalar"}));
}

TEST(SchemaFile, Lookups) {
  const Loaded l = load(kFile);
  ASSERT_TRUE(l.set) << l.diagnostics;
  const model::SchemaSet& set = *l.set;
  // No namespace means aten, written or not.
  ASSERT_NE(set.find("", "add.Tensor"), nullptr);
  EXPECT_EQ(set.find("aten", "add.Tensor"), set.find("", "add.Tensor"));
  EXPECT_EQ(set.find("", "add.Tensor")->name().overload, "Tensor");
  EXPECT_EQ(set.find("", "add"), nullptr);  // no empty overload of add
  EXPECT_EQ(set.find("", "add.Tensr"), nullptr);
  ASSERT_NE(set.find("", "mm"), nullptr);
  EXPECT_EQ(set.find("myops", "relu")->name().ns, "myops");
  EXPECT_NE(set.find("myops", "relu"), set.find("", "relu"));
  EXPECT_EQ(set.find("other", "relu"), nullptr);

  std::vector<std::string> add;
  for (const model::FunctionSchema* s : set.overloads("", "add")) add.push_back(s->name().overload);
  EXPECT_EQ(add, (std::vector<std::string>{"Tensor", "out", "Scalar"}));
  EXPECT_EQ(set.overloads("aten", "add_").size(), 1u);
  EXPECT_TRUE(set.overloads("", "nothing").empty());

  const std::vector<std::string_view> aten = set.operator_names("");
  EXPECT_EQ(aten, (std::vector<std::string_view>{"add", "add_", "mm", "relu"}));
  EXPECT_EQ(set.operator_names("aten"), aten);
  EXPECT_EQ(set.operator_names("myops"), std::vector<std::string_view>{"relu"});
  EXPECT_TRUE(set.operator_names("none").empty());
}

TEST(SchemaFile, SchemaLocationsPointAtTheFuncText) {
  const std::string text = kFile;
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("s.yaml", text);
  const auto set = schema::load_schema_files({file}, sm, diags);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->find("", "mm")->location().offset, text.find("mm("));  // inside the quotes
  const auto* out_overload = set->find("", "add.out");
  EXPECT_EQ(out_overload->location().offset, text.find("add.out("));
  EXPECT_EQ(out_overload->arguments().back().name_location.offset, text.find("out) ->"));
  const LineColumn lc = sm.line_column(set->find("", "relu")->location());
  EXPECT_EQ(lc.line, 9u);
  EXPECT_EQ(lc.column, 9u);
}

TEST(SchemaFile, DuplicateOverloadsAcrossFilesAreErrorsWithANote) {
  const Loaded l = load({{"a.yaml", "- func: f(Tensor x) -> Tensor\n- func: f.o(Tensor x) -> Tensor\n"},
                         {"b.yaml", "- func: g(Tensor x) -> Tensor\n- func: f.o(Tensor y) -> Tensor\n"
                                    "- func: aten::f(Tensor z) -> Tensor\n"}});
  EXPECT_FALSE(l.set.has_value());
  EXPECT_EQ(l.errors, 2u);
  EXPECT_EQ(l.diagnostics,
            "b.yaml:2:11: error: duplicate schema for 'f.o'\n"
            "- func: f.o(Tensor y) -> Tensor\n"
            "          ^\n"
            "a.yaml:2:9: note: first declared here\n"
            "- func: f.o(Tensor x) -> Tensor\n"
            "        ^\n"
            "b.yaml:3:15: error: duplicate schema for 'aten::f'\n"
            "- func: aten::f(Tensor z) -> Tensor\n"
            "              ^\n"
            "a.yaml:1:9: note: first declared here\n"
            "- func: f(Tensor x) -> Tensor\n"
            "        ^\n");
}

TEST(SchemaFile, EscapedScalarsReportAtTheScalar) {
  // The schema text differs from the bytes in the file, so errors point at the scalar itself.
  const Loaded l = load("- func: \"f(Tensr x) -> Tensor\\t\"\n- func: \"g\\x28Tensor x) -> Tensor\"\n"
                        "- func: \"g(Tensor x) -> Tensor\"\n");
  EXPECT_FALSE(l.set.has_value());
  EXPECT_EQ(l.diagnostics,
            "s.yaml:1:9: error: unknown type 'Tensr'; did you mean 'Tensor'?\n"
            "- func: \"f(Tensr x) -> Tensor\\t\"\n"
            "        ^\n"
            "s.yaml:3:10: error: duplicate schema for 'g'\n"
            "- func: \"g(Tensor x) -> Tensor\"\n"
            "         ^\n"
            "s.yaml:2:9: note: first declared here\n"
            "- func: \"g\\x28Tensor x) -> Tensor\"\n"
            "        ^\n");
}

TEST(SchemaFile, StructuralErrorsAreAllReported) {
  const Loaded l = load(
      "- func: ok(Tensor x) -> Tensor\n"
      "- just a scalar\n"
      "- variants: function\n"
      "- func: [not, a, string]\n"
      "- func:\n"
      "- func: bad(Tensor x) Tensor\n"
      "- func: fine(Tensor x) -> Tensor\n"
      "- [nested]\n");
  EXPECT_FALSE(l.set.has_value());
  EXPECT_EQ(l.errors, 6u);
  EXPECT_EQ(l.diagnostics,
            "s.yaml:2:3: error: expected an entry with 'func:', found a scalar\n- just a scalar\n  ^\n"
            "s.yaml:3:3: error: entry has no 'func:' key\n- variants: function\n  ^\n"
            "s.yaml:4:9: error: 'func:' must be a schema string, found a sequence\n- func: [not, a, string]\n"
            "        ^\n"
            "s.yaml:5:8: error: 'func:' must be a schema string, found an empty value\n- func:\n       ^\n"
            "s.yaml:6:23: error: expected '->' after the argument list, found 'Tensor'\n- func: bad(Tensor x) Tensor\n"
            "                      ^~~~~~\n"
            "s.yaml:8:3: error: expected an entry with 'func:', found a sequence\n- [nested]\n  ^\n");
}

TEST(SchemaFile, TopLevelShapes) {
  struct Case { std::string text, expected; };
  const Case cases[] = {
      {"", "s.yaml:1:1: error: schema file is empty; expected a sequence of entries with 'func:'\n\n^\n"},
      {"# nothing\n", "s.yaml:1:1: error: schema file is empty; expected a sequence of entries with 'func:'\n# nothing\n^\n"},
      {"func: f(Tensor x) -> Tensor\n",
       "s.yaml:1:1: error: expected a sequence of entries with 'func:', found a mapping\nfunc: f(Tensor x) -> Tensor\n^\n"},
      {"just text\n", "s.yaml:1:1: error: expected a sequence of entries with 'func:', found a scalar\njust text\n^\n"},
      {"- func: f(\n\tTensor x) -> Tensor\n",
       "s.yaml:2:1: error: tab character in indentation; YAML allows only spaces\n\tTensor x) -> Tensor\n^\n"},
  };
  for (const Case& c : cases) {
    const Loaded l = load(c.text);
    EXPECT_FALSE(l.set.has_value()) << c.text;
    EXPECT_EQ(l.diagnostics, c.expected) << c.text;
  }
  // An empty sequence is a valid (empty) schema file.
  const Loaded empty = load("[]\n");
  ASSERT_TRUE(empty.set) << empty.diagnostics;
  EXPECT_TRUE(empty.set->schemas().empty());
}

TEST(SchemaFile, ErrorsInOneFileDoNotHideTheNext) {
  const Loaded l = load({{"a.yaml", "- func: [\n"}, {"b.yaml", "- func: f(Tensr x) -> ()\n"}});
  EXPECT_EQ(l.errors, 2u);
  EXPECT_NE(l.diagnostics.find("a.yaml:2:1: error: invalid YAML"), std::string::npos) << l.diagnostics;
  EXPECT_NE(l.diagnostics.find("b.yaml:1:11: error: unknown type 'Tensr'"), std::string::npos) << l.diagnostics;
}

TEST(SchemaSet, AddReturnsTheEarlierDuplicate) {
  const Loaded l = load(kFile);
  ASSERT_TRUE(l.set);
  model::SchemaSet set;
  EXPECT_EQ(set.add(l.set->schemas()[0]), nullptr);
  EXPECT_EQ(set.add(l.set->schemas()[2]), nullptr);
  const model::FunctionSchema* earlier = set.add(l.set->schemas()[0]);
  ASSERT_NE(earlier, nullptr);
  EXPECT_EQ(earlier, &set.schemas()[0]);
  EXPECT_EQ(set.schemas().size(), 2u);
  // A namespace spelled `aten::` is the same overload as no namespace.
  const Loaded aten = load("- func: aten::mm(Tensor self, Tensor mat2) -> Tensor\n");
  ASSERT_TRUE(aten.set);
  EXPECT_EQ(set.add(aten.set->schemas()[0]), &set.schemas()[1]);
}

}  // namespace
}  // namespace autocastgen
