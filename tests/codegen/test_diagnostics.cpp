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

}  // namespace
}  // namespace autocastgen
