// Edit distance with a cut-off, and the did-you-mean rule built on it.
#include <gtest/gtest.h>

#include "support/strings.h"

namespace autocastgen {
namespace {

TEST(EditDistance, Levenshtein) {
  EXPECT_EQ(edit_distance("", "", 10), 0u);
  EXPECT_EQ(edit_distance("abc", "", 10), 3u);
  EXPECT_EQ(edit_distance("", "abc", 10), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting", 10), 3u);
  EXPECT_EQ(edit_distance("Tensor", "Tensr", 10), 1u);     // deletion
  EXPECT_EQ(edit_distance("Tensor", "Tensoor", 10), 1u);   // insertion
  EXPECT_EQ(edit_distance("Tensor", "Tansor", 10), 1u);    // substitution
  EXPECT_EQ(edit_distance("ab", "ba", 10), 2u);            // no transpositions
  EXPECT_EQ(edit_distance("flaw", "lawn", 10), 2u);
  EXPECT_EQ(edit_distance("same", "same", 0), 0u);
}

TEST(EditDistance, GivesUpPastTheLimit) {
  EXPECT_EQ(edit_distance("kitten", "sitting", 2), 3u);   // limit + 1
  EXPECT_EQ(edit_distance("a", "abcdefgh", 3), 4u);       // length difference alone
  EXPECT_EQ(edit_distance("abcdef", "uvwxyz", 1), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting", 3), 3u);   // exactly at the limit
}

TEST(ClosestMatch, SuggestsPlausibleTypos) {
  const std::vector<std::string_view> types = {"Tensor", "int", "float", "ScalarType", "Scalar", "SymInt"};
  EXPECT_EQ(closest_match("Tensr", types), "Tensor");
  EXPECT_EQ(closest_match("flaot", types), "");           // two edits, limit 5/3 = 1
  EXPECT_EQ(closest_match("ScalarTyp", types), "ScalarType");
  EXPECT_EQ(closest_match("Scalr", types), "Scalar");
  EXPECT_EQ(closest_match("Blob", types), "");
  // Ties go to the alphabetically first candidate, in whatever order the candidates come.
  EXPECT_EQ(closest_match("addm", {"addmm", "add"}), "add");
  EXPECT_EQ(closest_match("addm", {"add", "addmm"}), "add");
  EXPECT_EQ(closest_match("x", {}), "");
}

TEST(ClosestMatch, LimitGrowsWithLengthAndTiesGoToTheAlphabeticallyFirst) {
  // One typo per three characters, at least one.
  EXPECT_EQ(closest_match("ab", {"xy"}), "");
  EXPECT_EQ(closest_match("ab", {"ax"}), "ax");
  EXPECT_EQ(closest_match("abcdef", {"abcxyf"}), "abcxyf");   // 2 edits, limit 2
  EXPECT_EQ(closest_match("abcdef", {"axcxyf"}), "");         // 3 edits
  EXPECT_EQ(closest_match("cat", {"hat", "cut", "bat"}), "bat");
  EXPECT_EQ(closest_match("cat", {"hat", "cat"}), "cat");     // exact beats earlier near miss
}

TEST(TerminalText, EscapesWhatATerminalWouldObey) {
  EXPECT_EQ(terminal_text("layers.0.attn"), "layers.0.attn");
  EXPECT_EQ(terminal_text("caf\xc3\xa9 \xe4\xb8\xad\ttab"), "caf\xc3\xa9 \xe4\xb8\xad\ttab");  // UTF-8 and tabs kept
  EXPECT_EQ(terminal_text("a\x1b[31mb\x07\x7f"), "a\\x1b[31mb\\x07\\x7f");
  EXPECT_EQ(terminal_text("line\nbreak\r"), "line\\nbreak\\r");
  EXPECT_EQ(terminal_text("c1\xc2\x9b" "2J"), "c1\\u009b2J");                     // CSI as a C1 code point
  EXPECT_EQ(terminal_text("rtl\xe2\x80\xae" "exe.txt"), "rtl\\u202eexe.txt");    // U+202E
  EXPECT_EQ(terminal_text("latin1 \x9b \xff"), "latin1 \\x9b \\xff");          // not UTF-8
  EXPECT_EQ(terminal_text(std::string("nul\0", 4)), "nul\\x00");
}

TEST(Shortened, CutsLongTextBeforeAUtf8Sequence) {
  EXPECT_EQ(shortened("short"), "short");
  EXPECT_EQ(shortened(std::string(5000, '9')), std::string(40, '9') + "...");
  EXPECT_EQ(shortened(std::string(39, 'a') + "\xc3\xa9z"), std::string(39, 'a') + "...");
  EXPECT_EQ(shortened(std::string(40, 'a')), std::string(40, 'a'));
}

}  // namespace
}  // namespace autocastgen
