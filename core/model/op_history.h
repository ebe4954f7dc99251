// Which supported PyTorch releases define each aten overload: the facts behind diagnostics such as
// "rms_norm exists from 2.4 on" and behind release-gated policy entries (Note [release gates]).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "model/torch_version.h"

namespace autocastgen::model {

// The first and last supported release that define an overload (or any overload of an op).
struct ReleaseSpan {
  TorchVersion first;
  TorchVersion last;
  [[nodiscard]] bool contains(const TorchVersion& v) const { return first <= v && v <= last; }
  // `2.4-2.15`, or `2.4` for a single release.
  [[nodiscard]] std::string str() const;
};

class OpHistory {
 public:
  // The table built into autocastgen (schemas/torch_op_history.txt, made by
  // scripts/refresh-op-history from every supported release's native_functions.yaml).
  [[nodiscard]] static const OpHistory& builtin();
  // Lines `ns::name[.overload] FIRST LAST`; `#` starts a comment. Sets `error` (with a line number)
  // on malformed input.
  [[nodiscard]] static std::optional<OpHistory> parse(std::string_view text, std::string& error);

  // `aten::mm`, `aten::prod.dim_Dimname`.
  [[nodiscard]] std::optional<ReleaseSpan> overload(std::string_view qualified) const;
  // The union of the spans of every overload of `ns::name`.
  [[nodiscard]] std::optional<ReleaseSpan> op(std::string_view ns, std::string_view name) const;
  [[nodiscard]] bool empty() const { return overloads_.empty(); }

 private:
  std::map<std::string, ReleaseSpan, std::less<>> overloads_;
  std::map<std::string, ReleaseSpan, std::less<>> ops_;
};

}  // namespace autocastgen::model
