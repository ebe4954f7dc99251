// Strict template rendering: sections, partials, standalone lines, and errors for missing names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <unistd.h>

#include "emit/templates.h"

namespace autocastgen::emit {
namespace {

namespace fs = std::filesystem;

class TemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autocastgen_tmpl_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  std::optional<std::string> render(const std::string& name, const TemplateData& data) {
    diags_ = std::make_unique<DiagnosticEngine>(sources_, out_);
    auto set = TemplateSet::load(dir_, sources_, *diags_);
    if (!set) return std::nullopt;
    return set->render(name, data, *diags_);
  }
  // Whether the diagnostics contain `text`; on failure, the message shows them whole.
  ::testing::AssertionResult reported(std::string_view text) const {
    const std::string all = diagnostics();
    if (all.find(text) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "not reported: " << text << "\ndiagnostics:\n" << all;
  }
  std::string diagnostics() const {
    std::string text = out_.str();
    const std::string prefix = (dir_ / "").string();
    for (size_t pos; (pos = text.find(prefix)) != std::string::npos;) text.erase(pos, prefix.size());
    return text;
  }

  fs::path dir_;
  SourceManager sources_;
  std::ostringstream out_;
  std::unique_ptr<DiagnosticEngine> diags_;
};

TEST_F(TemplateTest, SectionsPartialsAndStandaloneLines) {
  write("main.mustache", "begin\n{{#items}}\n{{> item}}\n{{/items}}\n{{#flag}}\nflag on\n{{/flag}}\n{{^flag}}\nflag off\n{{/flag}}\nend <{{text}}>\n");
  write("item.mustache", "- {{name}}\n");
  TemplateData data;
  TemplateData items = TemplateData::type::list;
  items << TemplateData("name", "a") << TemplateData("name", "b");
  data.set("items", items);
  data.set("flag", false);
  data.set("text", "a<b&c");  // no HTML escaping
  EXPECT_EQ(render("main", data), "begin\n- a\n- b\nflag off\nend <a<b&c>\n") << diagnostics();
}

TEST_F(TemplateTest, PartialNamesDoNotCollideWithData) {
  write("main.mustache", "{{#items}}\n{{> item}}\n{{/items}}\n");
  write("item.mustache", "{{item}}!\n");
  TemplateData data;
  TemplateData items = TemplateData::type::list;
  items << TemplateData("item", "x");
  data.set("items", items);
  EXPECT_EQ(render("main", data), "x!\n") << diagnostics();
}

TEST_F(TemplateTest, MissingVariableIsAnErrorWithItsLocation) {
  write("main.mustache", "line one\nvalue: {{ value }}\n");
  EXPECT_EQ(render("main", TemplateData()), std::nullopt);
  EXPECT_EQ(diagnostics(),
            "main.mustache:2:8: error: template variable 'value' is not provided by the main emitter\n"
            "value: {{ value }}\n"
            "       ^~~~~~~~~~~\n");
}

TEST_F(TemplateTest, MissingSectionAndPartialAreErrors) {
  write("main.mustache", "{{#maybe}}x{{/maybe}}\n{{> nowhere}}\n");
  EXPECT_EQ(render("main", TemplateData()), std::nullopt);
  EXPECT_TRUE(reported("main.mustache:1:1: error: template variable 'maybe' is not provided"));
  EXPECT_TRUE(reported("main.mustache:2:1: error: template partial 'nowhere' is not provided"));
}

// The location is the first tag naming exactly the missing name: a '.' in it is a dot, and a
// triple mustache is underlined whole.
TEST_F(TemplateTest, MissingNamesPointAtTheirOwnTags) {
  write("main.mustache", "{{> partyx}}\n{{> part.x}}\n{{{ raw }}}\n");
  EXPECT_EQ(render("main", TemplateData()), std::nullopt);
  EXPECT_TRUE(reported("main.mustache:1:1: error: template partial 'partyx' is not provided"));
  EXPECT_TRUE(reported("main.mustache:2:1: error: template partial 'part.x' is not provided"));
  EXPECT_TRUE(reported("main.mustache:3:1: error: template variable 'raw' is not provided by the main emitter\n"
                       "{{{ raw }}}\n"
                       "^~~~~~~~~~~\n"));
}

TEST_F(TemplateTest, SyntaxErrorsAndMissingTemplates) {
  write("main.mustache", "{{#open}}never closed\n");
  TemplateData data;
  data.set("open", true);
  EXPECT_EQ(render("main", data), std::nullopt);
  EXPECT_TRUE(reported("main.mustache:1:1: error: invalid template: Unclosed section \"open\""));
  EXPECT_EQ(render("other", data), std::nullopt);
  EXPECT_TRUE(reported("template 'other' is missing (have: main)"));
}

TEST(BuiltinTemplates, TorchTargetHasItsTemplates) {
  SourceManager sources;
  std::ostringstream out;
  DiagnosticEngine diags(sources, out);
  auto set = TemplateSet::builtin("torch", sources, diags);
  ASSERT_TRUE(set) << out.str();
  EXPECT_TRUE(set->files().count("autocast.cpp"));
  EXPECT_TRUE(set->files().count("wrapper"));
  EXPECT_FALSE(TemplateSet::builtin("nonexistent", sources, diags));
}

}  // namespace
}  // namespace autocastgen::emit
