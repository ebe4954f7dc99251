// SourceManager: buffer ids, offset -> line:column, line text, clamping and file reading.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support/source_manager.h"

namespace autocastgen {
namespace {

TEST(SourceManager, BufferIdsStartAtOneAndKeepNames) {
  SourceManager sm;
  const uint32_t a = sm.add_buffer("a.yaml", "x");
  const uint32_t b = sm.add_buffer("b.yaml", "y");
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(sm.name(a), "a.yaml");
  EXPECT_EQ(sm.text(b), "y");
  EXPECT_EQ(sm.start_of(b), (SourceLocation{b, 0}));
  EXPECT_FALSE(SourceLocation{}.valid());
  EXPECT_TRUE(sm.start_of(a).valid());
  EXPECT_THROW((void)sm.text(0), std::out_of_range);
  EXPECT_THROW((void)sm.text(3), std::out_of_range);
}

TEST(SourceManager, LineAndColumnAreOneBased) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("f", "ab\ncde\n\nfg");
  struct Case { uint32_t offset, line, column; };
  for (const Case& c : {Case{0, 1, 1}, Case{1, 1, 2}, Case{2, 1, 3},  // '\n' belongs to its line
                        Case{3, 2, 1}, Case{5, 2, 3}, Case{6, 2, 4}, Case{7, 3, 1}, Case{8, 4, 1}, Case{9, 4, 2},
                        Case{10, 4, 3}}) {  // one past the end: after the last byte
    const LineColumn lc = sm.line_column({f, c.offset});
    EXPECT_EQ(lc.line, c.line) << "offset " << c.offset;
    EXPECT_EQ(lc.column, c.column) << "offset " << c.offset;
  }
  // Offsets beyond the buffer clamp to its end.
  EXPECT_EQ(sm.line_column({f, 1000}).line, 4u);
  EXPECT_EQ(sm.line_column({f, 1000}).column, 3u);
}

TEST(SourceManager, EmptyBufferHasOneLine) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("empty", "");
  EXPECT_EQ(sm.line_column({f, 0}).line, 1u);
  EXPECT_EQ(sm.line_column({f, 0}).column, 1u);
  EXPECT_EQ(sm.line_text({f, 0}), "");
}

TEST(SourceManager, LineTextDropsTerminators) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("crlf", "first\r\nsecond\r\n\r\nlast");
  EXPECT_EQ(sm.line_text({f, 0}), "first");
  EXPECT_EQ(sm.line_text({f, 5}), "first");  // the '\r'
  EXPECT_EQ(sm.line_text({f, 7}), "second");
  EXPECT_EQ(sm.line_column({f, 9}).column, 3u);
  EXPECT_EQ(sm.line_text({f, 15}), "");
  EXPECT_EQ(sm.line_text({f, 17}), "last");
  EXPECT_EQ(sm.line_column({f, 17}).line, 4u);
}

TEST(SourceManager, LocationOfRoundTripsAndClamps) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("f", "ab\ncde\nfg");
  EXPECT_EQ(sm.location_of(f, 2, 2).offset, 4u);
  EXPECT_EQ(sm.location_of(f, 1, 1).offset, 0u);
  EXPECT_EQ(sm.location_of(f, 0, 0).offset, 0u);    // line 0 and column 0 read as 1
  EXPECT_EQ(sm.location_of(f, 9, 1).offset, 9u);    // past the last line: end of buffer
  EXPECT_EQ(sm.location_of(f, 3, 50).offset, 9u);   // past the end: clamped
  for (uint32_t offset = 0; offset <= 9; ++offset) {
    const LineColumn lc = sm.line_column({f, offset});
    EXPECT_EQ(sm.location_of(f, lc.line, lc.column).offset, offset);
  }
}

TEST(SourceManager, AddFileReadsBytesAndReportsFailures) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "autocastgen_sm_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "bytes.yaml";
  const std::string bytes("a\0b\r\nc", 6);
  std::ofstream(path, std::ios::binary) << bytes;
  SourceManager sm;
  std::string error;
  const std::optional<uint32_t> file = sm.add_file(path, error);
  ASSERT_TRUE(file.has_value()) << error;
  EXPECT_EQ(sm.text(*file), bytes);
  EXPECT_EQ(sm.name(*file), path.string());

  EXPECT_FALSE(sm.add_file(dir / "missing.yaml", error).has_value());
  EXPECT_EQ(error, "No such file or directory");
  EXPECT_FALSE(sm.add_file(dir, error).has_value());
  EXPECT_EQ(error, "is a directory");
  std::filesystem::remove_all(dir);
}

// A file over its kind's limit is refused without reading past it (Note [yaml limits]).
TEST(SourceManager, AddFileRefusesAFileOverItsLimit) {
  SourceManager sm;
  std::string error;
  EXPECT_FALSE(sm.add_file("/dev/zero", error, size_t{1} << 20, "policy files").has_value());
  EXPECT_EQ(error, "larger than 1 MiB, the limit for policy files");
  const std::filesystem::path path = std::filesystem::path(testing::TempDir()) / "autocastgen_sm_limit.yaml";
  std::ofstream(path, std::ios::binary) << std::string(1000, 'x');
  EXPECT_FALSE(sm.add_file(path, error, 999, "tests").has_value());
  EXPECT_EQ(error, "larger than 999 bytes, the limit for tests");
  EXPECT_TRUE(sm.add_file(path, error, 1000, "tests").has_value()) << error;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace autocastgen
