// Op families for coverage reports: a documented, ordered table of name patterns (heuristics that
// group candidates for review; an author still decides each op's policy).
#pragma once

#include <string_view>
#include <vector>

namespace autocastgen::audit {

struct OpFamily {
  std::string_view id;       // stable key for JSON
  std::string_view title;    // for people
  std::string_view hint;     // what lists PyTorch usually puts such ops in
  // Space-separated shell globs (`*`, `?`, `[...]`, as fnmatch(3)); the family matches an op
  // name, leading underscores dropped, that fits any of them.
  std::string_view patterns;
};

// The table, in matching order (the first family whose pattern matches wins); the last entry,
// `other`, matches everything. See docs/audit.md, "Families".
[[nodiscard]] const std::vector<OpFamily>& op_families();

// The family of an operator name (`conv_tbc`, `_foreach_add`; no namespace, no overload).
[[nodiscard]] const OpFamily& family_of(std::string_view op_name);

}  // namespace autocastgen::audit
