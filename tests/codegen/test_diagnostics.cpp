// DiagnosticEngine: `file:line:col: severity: message`, the source line, caret and `~` underline.
#include <sstream>

#include <gtest/gtest.h>

#include "support/diagnostics.h"

namespace autocastgen {
namespace {

TEST(Diagnostics, ErrorPrintsLocationLineAndCaret) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("ops.yaml", "- func: foo(Tensr x) -> Tensor\n- func: bar\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 12}, "unknown type 'Tensr'", 5);
  EXPECT_EQ(out.str(),
            "ops.yaml:1:13: error: unknown type 'Tensr'\n"
            "- func: foo(Tensr x) -> Tensor\n"
            "            ^~~~~\n");
  EXPECT_EQ(diags.error_count(), 1u);
  EXPECT_TRUE(diags.has_errors());
}

TEST(Diagnostics, SeveritiesAndCounts) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("a", "one\ntwo\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.warning({f, 4}, "w");
  diags.note({f, 5}, "n");
  EXPECT_FALSE(diags.has_errors());
  EXPECT_EQ(diags.warning_count(), 1u);
  EXPECT_EQ(out.str(), "a:2:1: warning: w\ntwo\n^\na:2:2: note: n\ntwo\n ^\n");
  diags.error({f, 0}, "e");
  EXPECT_EQ(diags.error_count(), 1u);
  ASSERT_EQ(diags.diagnostics().size(), 3u);
  EXPECT_EQ(diags.diagnostics()[1].severity, Severity::note);
  EXPECT_EQ(diags.diagnostics()[2].message, "e");
}

TEST(Diagnostics, NoLocationNamesTheTool) {
  SourceManager sm;
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({}, "cannot read 'x': No such file or directory");
  EXPECT_EQ(out.str(), "autocastgen: error: cannot read 'x': No such file or directory\n");
}

TEST(Diagnostics, TabsKeptBeforeTheCaret) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("t", "\tkey:\tvalue\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 6}, "here", 5);
  EXPECT_EQ(out.str(), "t:1:7: error: here\n\tkey:\tvalue\n\t    \t^~~~~\n");
}

TEST(Diagnostics, UnderlineStopsAtTheEndOfTheLine) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("u", "abc\r\ndef");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 1}, "long", 100);   // the '\r' is no part of the line
  diags.error({f, 3}, "at end", 4);   // caret just past the text
  diags.error({f, 8}, "eof", 0);      // length 0 reads as 1
  EXPECT_EQ(out.str(),
            "u:1:2: error: long\nabc\n ^~\n"
            "u:1:4: error: at end\nabc\n   ^\n"
            "u:2:4: error: eof\ndef\n   ^\n");
  EXPECT_EQ(diags.diagnostics()[2].length, 1u);
}

TEST(Diagnostics, FormatMatchesWhatWasPrinted) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("name with spaces.yaml", "x: 1\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 3}, "bad", 1);
  EXPECT_EQ(diags.format(diags.diagnostics().front()), out.str());
  EXPECT_EQ(&diags.sources(), &sm);
}

// Note [diagnostics are bounded]: the first kMaxShownDiagnostics errors are printed and kept, the
// rest counted, their notes dropped with them; warnings have their own count.
TEST(Diagnostics, ErrorsPastTheLimitAreCountedNotShown) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("p.yaml", "x\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  for (size_t i = 0; i < kMaxShownDiagnostics + 5; ++i) {
    diags.error({f, 0}, "e" + std::to_string(i));
    diags.note({f, 0}, "n" + std::to_string(i));
  }
  diags.warning({f, 0}, "w");
  EXPECT_EQ(diags.error_count(), kMaxShownDiagnostics + 5);
  EXPECT_EQ(diags.diagnostics().size(), 2 * kMaxShownDiagnostics + 1);  // the shown errors, their notes, the warning
  EXPECT_EQ(diags.error_summary(), "25 errors (5 not shown)");
  const std::string text = out.str();
  EXPECT_NE(text.find("error: e19\n"), std::string::npos);
  EXPECT_NE(text.find("note: n19\n"), std::string::npos);
  EXPECT_EQ(text.find("e20"), std::string::npos);
  EXPECT_EQ(text.find("n20"), std::string::npos);
  EXPECT_NE(text.find("autocastgen: note: more than 20 errors; the rest are counted, not shown\n"), std::string::npos);
  EXPECT_NE(text.find("warning: w\n"), std::string::npos);
  // Summaries under the limit read as before.
  DiagnosticEngine few(sm, out);
  few.error({f, 0}, "one");
  EXPECT_EQ(few.error_summary(), "1 error");
}

// A long line (a minified file, a 60,000-space line) is shown around the column.
TEST(Diagnostics, LongLinesAreShownAroundTheColumn) {
  SourceManager sm;
  const std::string line = std::string(1000, ' ') + "bad" + std::string(1000, 'z');
  const uint32_t f = sm.add_buffer("l.yaml", line + "\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 1000}, "here", 3);
  EXPECT_EQ(out.str(), "l.yaml:1:1001: error: here\n..." + std::string(100, ' ') + "bad" + std::string(97, 'z') +
                           "...\n" + std::string(103, ' ') + "^~~\n");
}

// Note [text for terminals]: messages, file names and source lines never carry a control
// sequence to the terminal.
TEST(Diagnostics, ControlCharactersArePrintedEscaped) {
  SourceManager sm;
  const uint32_t f = sm.add_buffer("a\x1b[2Jb.yaml", "op: \"x\xc2\x9b\x1b[31m\"\n");
  std::ostringstream out;
  DiagnosticEngine diags(sm, out);
  diags.error({f, 4}, "unknown op 'x\xc2\x9b\x1b[31m'");
  EXPECT_EQ(out.str(), "a\\x1b[2Jb.yaml:1:5: error: unknown op 'x\\u009b\\x1b[31m'\nop: \"x???[31m\"\n    ^\n");
}

}  // namespace
}  // namespace autocastgen
