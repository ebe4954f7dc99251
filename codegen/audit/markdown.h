// Markdown helpers shared by the audit reports.
#pragma once

#include <string>
#include <string_view>

namespace autocastgen::audit {

// A Markdown table cell: pipes and line breaks would break the row.
inline std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += "<br>";
    else out.push_back(c);
  }
  return out;
}

}  // namespace autocastgen::audit
