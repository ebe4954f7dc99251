// Reads one policy YAML file into a PolicyFile, reporting every problem of its shape.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "policy/policy.h"
#include "support/diagnostics.h"
#include "support/yaml.h"

namespace autocastgen::policy {

// Checks keys, value shapes, policy names, devices, dtypes and op-name syntax; nothing that needs
// schemas. Returns nullopt when any error was reported.
[[nodiscard]] std::optional<PolicyFile> parse_policy_file(const SourceManager& sources, uint32_t file,
                                                          DiagnosticEngine& diags);

// One list entry given as values rather than as YAML (register_runtime_policy's arguments): each
// value is checked as parse_policy_file checks the same field of a file, with the same messages.
// Returns a policy of that one entry; nullopt when any error was reported.
struct EntryValues {
  Located device;
  Located policy;
  Located op;
  std::optional<Located> message;
  // The entry's precision rule (Note [precision rules]): a mapping with `dtypes:`, `when:`,
  // `unless:` and `args:`, as a list entry would hold them beside `op:`.
  const YamlNode* rule = nullptr;
};
[[nodiscard]] std::optional<PolicyFile> parse_policy_entry(uint32_t file, const EntryValues& values, DiagnosticEngine& diags);

class FileParser;

// Reads fields of the policy language out of other YAML documents (the manifests `generate`
// writes hold the same header fields and list entries) with a policy file's checks and messages.
// Each call reports its problems and returns nullopt when it found any.
class FieldReader {
 public:
  explicit FieldReader(DiagnosticEngine& diags);
  ~FieldReader();
  FieldReader(const FieldReader&) = delete;
  FieldReader& operator=(const FieldReader&) = delete;

  [[nodiscard]] std::optional<Located> device(const YamlNode& node);
  [[nodiscard]] std::optional<Located> dispatch_key(const YamlNode& node);
  [[nodiscard]] std::optional<std::vector<Located>> lower_precision(const YamlNode& node);
  [[nodiscard]] std::optional<Fp8Recipe> fp8(const YamlNode& node);
  [[nodiscard]] std::optional<PolicyKind> policy(const YamlNode& node);
  // The `modules:` section (Note [precision by place]): a mapping of patterns to values.
  [[nodiscard]] std::optional<std::vector<WrittenSection>> sections(const YamlNode& node);
  // One list entry of `policy`: an op name, or a mapping with `op:` and the entry's other keys;
  // keys in `ignored` may stand beside them (a manifest's `schema:`, `wrapper:`, ...).
  [[nodiscard]] std::optional<PolicyEntry> entry(PolicyKind policy, const YamlNode& item,
                                                 std::span<const std::string_view> ignored = {});

 private:
  std::unique_ptr<FileParser> parser_;
};

// `[ns::]name`, `[ns::]name.overload` or `[ns::]name.*`, split.
struct OpPattern {
  std::string ns;  // empty: aten
  std::string name;
  std::string overload;
  bool all_overloads = false;

  [[nodiscard]] bool is_aten() const { return ns.empty() || ns == model::kDefaultNamespace; }
  [[nodiscard]] std::string_view namespace_or_aten() const { return ns.empty() ? model::kDefaultNamespace : ns; }
  // `name` or `name.overload` (no namespace; not for `name.*`).
  [[nodiscard]] std::string unqualified() const { return overload.empty() ? name : name + "." + overload; }
  // `ns::name[.overload]` with aten's namespace spelled out.
  [[nodiscard]] std::string qualified() const { return std::string(namespace_or_aten()) + "::" + unqualified(); }
};
[[nodiscard]] std::optional<OpPattern> parse_op_pattern(std::string_view text);

}  // namespace autocastgen::policy
