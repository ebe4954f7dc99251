// The located YAML layer: node locations, exact scalar text, errors, aliases.
#include <sstream>

#include <gtest/gtest.h>

#include "support/yaml.h"
#include "yaml_tree_diff.h"

namespace autocastgen {
namespace {

using testing_support::yaml_tree_diff;

struct Parsed {
  std::optional<YamlNode> root;
  std::string diagnostics;
  size_t errors = 0;
};

Parsed parse(const std::string& text) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("t.yaml", text);
  Parsed parsed;
  parsed.root = parse_yaml(sm, file, diags);
  parsed.diagnostics = out.str();
  parsed.errors = diags.error_count();
  return parsed;
}

uint32_t offset_of(const std::string& text, std::string_view needle, size_t from = 0) {
  const size_t pos = text.find(needle, from);
  EXPECT_NE(pos, std::string::npos) << needle;
  return static_cast<uint32_t>(pos);
}

TEST(Yaml, ScalarLocationsAndExactText) {
  const std::string text =
      "- func: foo(Tensor self) -> Tensor\n"
      "  single: 'it is'\n"
      "  double: \"plain text\"\n"
      "  escaped: \"a\\tb\"\n"
      "  doubled: 'it''s'\n"
      "  folded: >\n"
      "    two\n"
      "    lines\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  ASSERT_TRUE(p.root->is_sequence());
  ASSERT_EQ(p.root->items().size(), 1u);
  const YamlNode& entry = p.root->items()[0];
  ASSERT_TRUE(entry.is_mapping());
  EXPECT_EQ(entry.location().offset, 2u);
  ASSERT_EQ(entry.pairs().size(), 6u);

  const YamlNode* func = entry.find("func");
  ASSERT_NE(func, nullptr);
  EXPECT_EQ(func->scalar(), "foo(Tensor self) -> Tensor");
  EXPECT_EQ(func->location().offset, offset_of(text, "foo("));
  EXPECT_EQ(func->exact_text_location()->offset, func->location().offset);
  EXPECT_EQ(func->source_length(), func->scalar().size());
  EXPECT_EQ(entry.pairs()[0].first.location().offset, offset_of(text, "func"));

  const YamlNode* single = entry.find("single");
  EXPECT_EQ(single->scalar(), "it is");
  EXPECT_EQ(single->location().offset, offset_of(text, "'it is'"));       // the quote
  EXPECT_EQ(single->exact_text_location()->offset, offset_of(text, "it is"));
  EXPECT_EQ(single->source_length(), 7u);                                  // quotes included

  const YamlNode* dbl = entry.find("double");
  EXPECT_EQ(dbl->exact_text_location()->offset, offset_of(text, "plain text"));

  // Escapes change the bytes: the value has no exact place in the buffer.
  const YamlNode* escaped = entry.find("escaped");
  EXPECT_EQ(escaped->scalar(), "a\tb");
  EXPECT_FALSE(escaped->exact_text_location().has_value());
  EXPECT_EQ(escaped->location().offset, offset_of(text, "\"a\\tb\""));
  EXPECT_EQ(escaped->source_length(), 1u);
  EXPECT_EQ(entry.find("doubled")->scalar(), "it's");
  EXPECT_FALSE(entry.find("doubled")->exact_text_location().has_value());
  EXPECT_EQ(entry.find("folded")->scalar(), "two lines\n");
  EXPECT_FALSE(entry.find("folded")->exact_text_location().has_value());
  EXPECT_EQ(entry.find("missing"), nullptr);
}

TEST(Yaml, KindsNullsAndDescriptions) {
  const std::string text = "a:\nb: [1, {c: d}]\nc: ~\n? [k]\n: v\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  ASSERT_TRUE(p.root->is_mapping());
  ASSERT_EQ(p.root->pairs().size(), 4u);
  EXPECT_TRUE(p.root->find("a")->is_null());
  EXPECT_EQ(p.root->find("a")->location().offset, 2u);  // right after "a:", not at the next key
  EXPECT_EQ(p.root->find("a")->describe(), "an empty value");
  const YamlNode& b = *p.root->find("b");
  EXPECT_EQ(b.describe(), "a sequence");
  EXPECT_EQ(b.location().offset, offset_of(text, "["));
  ASSERT_EQ(b.items().size(), 2u);
  EXPECT_EQ(b.items()[0].describe(), "a scalar");
  EXPECT_EQ(b.items()[1].describe(), "a mapping");
  EXPECT_EQ(b.items()[1].find("c")->location().offset, offset_of(text, "d}"));
  EXPECT_TRUE(p.root->find("c")->is_null());
  EXPECT_EQ(p.root->find("c")->location().offset, offset_of(text, "~"));
  // A non-scalar key is kept, but find() only matches scalar keys.
  EXPECT_TRUE(p.root->pairs()[3].first.is_sequence());
  EXPECT_EQ(p.root->pairs()[3].second.scalar(), "v");
}

TEST(Yaml, EmptyValuesAreLocatedAfterTheirKey) {
  const std::string text = "- func:\n- func: ~\n-\n- k: &x\n- last:\n\n\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  ASSERT_EQ(p.root->items().size(), 5u);
  EXPECT_EQ(p.root->items()[0].find("func")->location().offset, 7u);
  EXPECT_EQ(p.root->items()[1].find("func")->location().offset, offset_of(text, "~"));
  EXPECT_TRUE(p.root->items()[2].is_null());
  EXPECT_EQ(p.root->items()[2].location().offset, offset_of(text, "-\n- k") + 1);
  EXPECT_EQ(p.root->items()[3].find("k")->location().offset, offset_of(text, "&x"));
  EXPECT_EQ(p.root->items()[4].find("last")->location().offset, offset_of(text, "last:") + 5);
}

TEST(Yaml, EmptyDocumentsGiveANullRoot) {
  for (const char* text : {"", "# only a comment\n", "\n\n   \n"}) {
    const Parsed p = parse(text);
    ASSERT_TRUE(p.root) << text;
    EXPECT_TRUE(p.root->is_null()) << text;
    EXPECT_EQ(p.root->location().offset, 0u);
    EXPECT_EQ(p.errors, 0u);
  }
  const Parsed marker = parse("---\n");
  ASSERT_TRUE(marker.root);
  EXPECT_TRUE(marker.root->is_null());
  EXPECT_EQ(marker.root->location().offset, 3u);  // right after the marker
}

TEST(Yaml, SyntaxErrorsAreLocatedDiagnostics) {
  struct Case { std::string text, expected; };
  const Case cases[] = {
      {"- a\n- [b, c\n",
       "t.yaml:3:1: error: invalid YAML: end of sequence flow not found\n\n^\n"
       "t.yaml:2:3: note: the '[' that is not closed\n- [b, c\n  ^\n"},
      {"a: {b: [c, d}\n",
       "t.yaml:1:13: error: invalid YAML: illegal flow end\na: {b: [c, d}\n            ^\n"
       "t.yaml:1:8: note: the '[' that is not closed\na: {b: [c, d}\n       ^\n"},
      {"- func: f\n  variants\n", "t.yaml:2:3: error: invalid YAML: expected ':' after the mapping key 'variants'\n"
                                    "  variants\n  ^\n"},
      // yaml-cpp itself would take the rest of the file as the open scalar's value.
      {"key: \"open\n", "t.yaml:1:6: error: invalid YAML: missing closing quote\nkey: \"open\n     ^\n"},
      {"- 'it''s\n", "t.yaml:1:3: error: invalid YAML: missing closing quote\n- 'it''s\n  ^\n"},
      {"k: &a !!str \"x\\\"\n", "t.yaml:1:4: error: invalid YAML: missing closing quote\nk: &a !!str \"x\\\"\n   ^\n"},
      // yaml-cpp ends the sequence and starts an implicit second document at `b`.
      {"- a\nb: c\n", "t.yaml:2:1: error: expected a single YAML document, found another one here\nb: c\n^\n"},
      {"a: b: c\n", "t.yaml:1:5: error: invalid YAML: illegal map value\na: b: c\n    ^\n"},
      {"a: 1\n---\nb: 2\n", "t.yaml:3:1: error: expected a single YAML document, found another one here\nb: 2\n^\n"},
      {"- *nowhere\n", "t.yaml:1:3: error: invalid YAML: the referenced anchor is not defined\n- *nowhere\n  ^\n"},
  };
  for (const Case& c : cases) {
    const Parsed p = parse(c.text);
    EXPECT_FALSE(p.root.has_value()) << c.text;
    EXPECT_EQ(p.diagnostics, c.expected) << c.text;
  }
}

TEST(Yaml, ImplicitKeysNeedAColonOnTheirLine) {
  // What PyYAML accepts here is accepted; lone scalar lines in a block mapping are not.
  for (const char* text : {"a: 1\n\"b c\": 2\n'd''e' : 3\n\"f\\tg\": 4\n", "? a\n: 1\n? b\n", "&k key: v\nother: *k\n",
                           "m: {a, b: c}\n", "- x\n- y: z\n  w: |\n    no colon here\n"}) {
    const Parsed p = parse(text);
    EXPECT_TRUE(p.root.has_value()) << text << p.diagnostics;
  }
  struct Case { const char* text; const char* expected; };
  const Case cases[] = {
      {"a: 1\nb\n", "t.yaml:2:1: error: invalid YAML: expected ':' after the mapping key 'b'\nb\n^\n"},
      {"- a: 1\n  two\n    lines\n", "t.yaml:2:3: error: invalid YAML: expected ':' after the mapping key 'two lines'\n"
                                        "  two\n  ^\n"},
      // yaml-cpp finds this one itself.
      {"a: 1\n\"b\nc\": 2\n", "t.yaml:3:3: error: invalid YAML: illegal map value\nc\": 2\n  ^\n"},
      {"a: 1\n" "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
       "t.yaml:2:1: error: invalid YAML: expected ':' after the mapping key 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb...'\n"
       "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n^\n"},
  };
  for (const Case& c : cases) EXPECT_EQ(parse(c.text).diagnostics, c.expected) << c.text;
}

TEST(Yaml, EveryTabIndentedLineIsReported) {
  const Parsed p = parse("- a: 1\n\tb: 2\n  c: 3\n  \td: 4\ne:\tf\n");
  EXPECT_FALSE(p.root.has_value());
  EXPECT_EQ(p.errors, 2u);
  EXPECT_EQ(p.diagnostics,
            "t.yaml:2:1: error: tab character in indentation; YAML allows only spaces\n\tb: 2\n^\n"
            "t.yaml:4:3: error: tab character in indentation; YAML allows only spaces\n  \td: 4\n  ^\n");
}

TEST(Yaml, ByteOrderMarkIsCountedInLocations) {
  const std::string text = "\xEF\xBB\xBF- func: a\n- b\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  EXPECT_EQ(p.root->location().offset, 3u);
  EXPECT_EQ(p.root->items()[0].find("func")->exact_text_location()->offset, offset_of(text, "a\n"));
  EXPECT_EQ(p.root->items()[1].location().offset, offset_of(text, "b\n"));
  const Parsed bad = parse("\xEF\xBB\xBF" "a: b: c\n");
  EXPECT_EQ(bad.diagnostics, "t.yaml:1:8: error: invalid YAML: illegal map value\n\xEF\xBB\xBF" "a: b: c\n       ^\n");
}

TEST(Yaml, CrLfLineEndings) {
  const std::string text = "- func: a\r\n  x: \"q\"\r\n- b\r\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  EXPECT_EQ(p.root->items()[0].find("x")->exact_text_location()->offset, offset_of(text, "q"));
  EXPECT_EQ(p.root->items()[1].location().offset, offset_of(text, "b\r"));
  EXPECT_EQ(p.root->items()[1].scalar(), "b");
}

TEST(Yaml, ExactTextSkipsAnchorsAndTags) {
  const std::string text = "a: &x \"abc\"\nb: !!str q\nc: &y !<tag:t> 'r s'\nd: *x\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  EXPECT_EQ(p.root->find("a")->location().offset, offset_of(text, "&x"));
  EXPECT_EQ(p.root->find("a")->exact_text_location()->offset, offset_of(text, "abc"));
  EXPECT_EQ(p.root->find("b")->exact_text_location()->offset, offset_of(text, "q\n"));
  EXPECT_EQ(p.root->find("c")->exact_text_location()->offset, offset_of(text, "r s"));
  EXPECT_EQ(p.root->find("d")->exact_text_location()->offset, offset_of(text, "abc"));  // the anchored node
}

TEST(Yaml, AliasesCopyTheAnchoredNode) {
  const std::string text = "base: &b {x: 1, y: [2]}\nuse: *b\n";
  const Parsed p = parse(text);
  ASSERT_TRUE(p.root) << p.diagnostics;
  EXPECT_EQ(yaml_tree_diff(*p.root->find("base"), *p.root->find("use")), "");
  EXPECT_EQ(p.root->find("use")->find("x")->scalar(), "1");
}

TEST(Yaml, AliasExpansionIsBounded) {
  // Ten levels of ten aliases each would expand to 10^10 nodes.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  const Parsed p = parse(text);
  EXPECT_FALSE(p.root.has_value());
  EXPECT_NE(p.diagnostics.find("t.yaml:6:"), std::string::npos) << p.diagnostics;  // within a5's aliases
  EXPECT_NE(p.diagnostics.find("error: invalid YAML: anchors and aliases copy more than 64 MiB"), std::string::npos)
      << p.diagnostics;
  // Five levels (10^5 nodes) are fine.
  const Parsed small = parse(text.substr(0, text.find("a5:")));
  ASSERT_TRUE(small.root) << small.diagnostics;
  EXPECT_EQ(small.root->find("a4")->items()[9].items()[9].items()[9].items()[9].items()[9].scalar(), "x");
}

// Few nodes, long scalars: the bytes copied count, not only the nodes (issue 47: 65 KB asked for
// ~16 GiB).
TEST(Yaml, AliasesOfLongScalarsAreBoundedInBytes) {
  std::string text = "a0: &a0 ['" + std::string(60'000, 'x') + "']\n";
  for (int i = 1; i < 6; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  ASSERT_LT(text.size(), 70'000u);
  const Parsed p = parse(text);
  EXPECT_FALSE(p.root.has_value());
  EXPECT_NE(p.diagnostics.find("t.yaml:4:"), std::string::npos) << p.diagnostics;  // a3: 1000 copies, 60 MB
  EXPECT_NE(p.diagnostics.find("anchors and aliases copy more than 64 MiB"), std::string::npos) << p.diagnostics;
}

// Anchors keep a copy of their node: nested anchors would copy a large tree once per level.
TEST(Yaml, NestedAnchorsCountTheirCopies) {
  std::string text = "x: ";
  for (int level = 0; level < 60; ++level) text += "&n" + std::to_string(level) + " [";
  text += "'" + std::string(2'000'000, 'z') + "'" + std::string(60, ']') + "\n";
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("t.json", text);
  EXPECT_FALSE(parse_yaml(sm, file, diags, "JSON", "statistics files", kMaxRecordFileBytes).has_value());
  EXPECT_NE(out.str().find("anchors and aliases copy more than 64 MiB"), std::string::npos) << out.str();
}

TEST(Yaml, TextOverTheLimitOfItsKindIsNotParsed) {
  const Parsed p = parse("lists: [" + std::string(kMaxPolicyFileBytes, ' ') + "]\n");
  EXPECT_FALSE(p.root.has_value());
  EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find('\n')),
            "t.yaml:1:1: error: file is larger than 1 MiB, the limit for policy and schema files");
}

// The limits at their edges, in the values docs/cli.md#limits gives (written out here, not taken
// from yaml.h: a limit one off is a failure). Note [yaml limits] in yaml.h.

Parsed parse_record(const std::string& text, size_t max_bytes = kMaxRecordFileBytes) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  const uint32_t file = sm.add_buffer("t.json", text);
  Parsed parsed;
  parsed.root = parse_yaml(sm, file, diags, "JSON", "statistics files", max_bytes);
  parsed.diagnostics = out.str();
  parsed.errors = diags.error_count();
  return parsed;
}

// "[],{},~,1," is four nodes, one of each kind: a million nodes in all parse, and one more is an
// error at the node past the limit (each kind counts: were one not counted, a quarter of the
// nodes would be missing and both documents would parse).
TEST(Yaml, TheNodeLimitCountsEveryKindAndIsExact) {
  std::string text = "[";
  for (int i = 0; i < 249'999; ++i) text += "[],{},~,1,";
  const Parsed fits = parse_record(text + "[],{},~]");  // the root, 249,999 fours and three
  ASSERT_TRUE(fits.root.has_value()) << fits.diagnostics.substr(0, 200);
  EXPECT_EQ(fits.root->items().size(), 999'999u);
  text += "[],{},~,1]";
  const Parsed p = parse_record(text);
  EXPECT_FALSE(p.root.has_value());
  EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find('\n')),
            "t.json:1:" + std::to_string(text.size() - 1) + ": error: invalid JSON: more than 1000000 nodes in one document");
}

// An alias adds the nodes it copies, its anchor's children included (nulls too): the alias that
// takes a document past a million nodes is the error, even as its last node.
TEST(Yaml, TheNodeLimitCountsWhatAnAliasCopies) {
  std::string text = "[";
  for (int i = 0; i < 999'978; ++i) text += "1,";
  text += "&a [~,~,~,~,~,~,~,~,~,~], *a]";  // 11 nodes, and 11 more by *a: 1,000,001 in all
  const Parsed p = parse_record(text);
  EXPECT_FALSE(p.root.has_value());
  EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find('\n')),
            "t.json:1:" + std::to_string(text.rfind("*a") + 1) +
                ": error: invalid JSON: more than 1000000 nodes in one document");
}

// 1024 copies (the anchor's and 1023 aliases') of a scalar node: each its node's size in memory
// plus its bytes. 64 MiB of copies exactly parse; one byte more is an error, at the copy that makes it.
TEST(Yaml, TheCopiedBytesLimitIsExact) {
  constexpr size_t kCopies = 1024;
  const size_t scalar = (size_t{64} << 20) / kCopies - sizeof(YamlNode);
  const auto text = [&](size_t aliases) {
    std::string text = "a: &a '" + std::string(scalar, 'x') + "'\nb: [*a";
    for (size_t i = 1; i < aliases; ++i) text += ", *a";
    return text + "]\n";
  };
  const Parsed fits = parse(text(kCopies - 1));
  ASSERT_TRUE(fits.root.has_value()) << fits.diagnostics;
  EXPECT_EQ(fits.root->find("b")->items().size(), kCopies - 1);
  EXPECT_EQ(fits.root->find("b")->items().back().scalar().size(), scalar);
  // One alias fewer, and an anchored node one byte longer than the others: 64 MiB and one byte.
  const std::string over = text(kCopies - 2) + "c: &c '" + std::string(scalar + 1, 'y') + "'\n";
  const Parsed p = parse(over);
  EXPECT_FALSE(p.root.has_value());
  EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find(':', p.diagnostics.find(':') + 1)), "t.yaml:3") << p.diagnostics;
  EXPECT_NE(p.diagnostics.find(": error: invalid YAML: anchors and aliases copy more than 64 MiB"), std::string::npos)
      << p.diagnostics;
}

// 64 levels of sequences and mappings, flow and block, parse; the 65th opener is the error.
TEST(Yaml, TheDepthLimitIsExactForSequencesAndMappings) {
  struct Form {
    std::string open, close, name;
  };
  for (const Form& form : {Form{"[", "]", "flow sequences"}, Form{"{a: ", "}", "flow mappings"}}) {
    for (int depth : {64, 65}) {
      std::string text;
      for (int i = 0; i < depth; ++i) text += form.open;
      text += "1";
      for (int i = 0; i < depth; ++i) text += form.close;
      text += "\n";
      const Parsed p = parse(text);
      if (depth == 64) {
        EXPECT_TRUE(p.root.has_value()) << form.name << ": " << p.diagnostics;
      } else {
        EXPECT_FALSE(p.root.has_value()) << form.name;
        EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find('\n')),
                  "t.yaml:1:" + std::to_string(64 * form.open.size() + 1) +
                      ": error: invalid YAML: nesting deeper than 64 levels")
            << form.name;
      }
    }
  }
  // Block mappings: `k:` one more space in on each line.
  for (int depth : {64, 65}) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += std::string(i, ' ') + "k:\n";
    text += std::string(depth, ' ') + "v\n";
    const Parsed p = parse(text);
    if (depth == 64) {
      EXPECT_TRUE(p.root.has_value()) << p.diagnostics;
    } else {
      EXPECT_FALSE(p.root.has_value());
      EXPECT_EQ(p.diagnostics.substr(0, p.diagnostics.find('\n')),
                "t.yaml:65:65: error: invalid YAML: nesting deeper than 64 levels");
    }
  }
}

// A file of exactly its kind's limit is read; one byte more is not (comments: cheap to parse).
TEST(Yaml, TextAtTheLimitOfItsKindIsParsed) {
  struct Kind {
    size_t max_bytes, limit;
    std::string_view files, shown;
  };
  for (const Kind& kind : {Kind{kMaxPolicyFileBytes, size_t{1} << 20, "policy and schema files", "1 MiB"},
                           Kind{kMaxSchemaFileBytes, size_t{16} << 20, "schema files", "16 MiB"},
                           Kind{kMaxRecordFileBytes, size_t{32} << 20, "statistics files", "32 MiB"}}) {
    for (size_t extra : {0, 1}) {
      const std::string text = "a: 1\n#" + std::string(kind.limit + extra - 7, 'c') + "\n";
      SourceManager sm;
      std::ostringstream out;
      DiagnosticEngine diags(sm, out);
      const uint32_t file = sm.add_buffer("t.yaml", text);
      const std::optional<YamlNode> root = parse_yaml(sm, file, diags, "YAML", kind.files, kind.max_bytes);
      if (extra == 0) {
        ASSERT_TRUE(root.has_value()) << kind.shown << ": " << out.str();
        EXPECT_EQ(root->find("a")->scalar(), "1");
      } else {
        EXPECT_FALSE(root.has_value()) << kind.shown;
        EXPECT_EQ(out.str().substr(0, out.str().find('\n')),
                  "t.yaml:1:1: error: file is larger than " + std::string(kind.shown) + ", the limit for " +
                      std::string(kind.files))
            << kind.shown;
      }
    }
  }
}

}  // namespace
}  // namespace autocastgen
