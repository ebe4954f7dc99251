// The output writer: duplicates refused, unchanged files untouched, nothing written after errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "emit/output_writer.h"

namespace autocastgen::emit {
namespace {

namespace fs = std::filesystem;

class OutputWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autocastgen_out_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
  SourceManager sources_;
  std::ostringstream out_;
  DiagnosticEngine diags_{sources_, out_};
};

TEST_F(OutputWriterTest, WritesOnlyChangedFiles) {
  OutputWriter first(dir_);
  ASSERT_TRUE(first.add("a.cpp", "one\n", diags_));
  ASSERT_TRUE(first.add("sub/b.json", "{}\n", diags_));
  EXPECT_EQ(first.stale().size(), 2u);
  EXPECT_EQ(first.write(diags_).size(), 2u);
  EXPECT_EQ(read("sub/b.json"), "{}\n");
  const auto stamp = fs::last_write_time(dir_ / "a.cpp");

  OutputWriter second(dir_);
  ASSERT_TRUE(second.add("a.cpp", "one\n", diags_));
  ASSERT_TRUE(second.add("sub/b.json", "{\"x\": 1}\n", diags_));
  EXPECT_EQ(second.stale(), std::vector<std::string>{(dir_ / "sub/b.json").string()});
  EXPECT_EQ(second.write(diags_), std::vector<std::string>{(dir_ / "sub/b.json").string()});
  EXPECT_EQ(fs::last_write_time(dir_ / "a.cpp"), stamp);
  EXPECT_EQ(read("sub/b.json"), "{\"x\": 1}\n");
  EXPECT_FALSE(diags_.has_errors());
}

TEST_F(OutputWriterTest, RefusesDuplicatePaths) {
  OutputWriter writer(dir_);
  ASSERT_TRUE(writer.add("a.cpp", "x", diags_));
  EXPECT_FALSE(writer.add("a.cpp", "y", diags_));
  EXPECT_NE(out_.str().find("two generated files would both be written to"), std::string::npos);
}

TEST_F(OutputWriterTest, WritesNothingAfterErrors) {
  OutputWriter writer(dir_);
  ASSERT_TRUE(writer.add("a.cpp", "x", diags_));
  diags_.error({}, "an earlier phase failed");
  EXPECT_TRUE(writer.write(diags_).empty());
  EXPECT_FALSE(fs::exists(dir_ / "a.cpp"));
}

TEST_F(OutputWriterTest, DepfileListsEveryInputForEveryOutput) {
  OutputWriter writer(dir_);
  ASSERT_TRUE(writer.add("a.cpp", "x", diags_));
  std::string unwritable;
  const std::optional<std::string> dep = writer.depfile({"/p/policy.yaml", "/p/my base.yaml"}, unwritable);
  ASSERT_TRUE(dep.has_value());
  EXPECT_EQ(*dep, (dir_ / "a.cpp").lexically_normal().string() + ": \\\n  /p/policy.yaml \\\n  /p/my\\ base.yaml\n");
}

TEST_F(OutputWriterTest, ADepfileCannotNameALineBreakButTheInputListCan) {
  OutputWriter writer(dir_);
  ASSERT_TRUE(writer.add("a.cpp", "x", diags_));
  std::string unwritable;
  EXPECT_FALSE(writer.depfile({"/p/policy.yaml", "/p/b\n#include <x>"}, unwritable).has_value());
  EXPECT_EQ(unwritable, "/p/b\n#include <x>");
  EXPECT_EQ(OutputWriter::input_list({"/p/policy.yaml", "/p/b\n#x", "/p/\xff"}),
            std::string("/p/policy.yaml") + '\0' + "/p/b\n#x" + '\0' + "/p/\xff" + '\0');
}

}  // namespace
}  // namespace autocastgen::emit
