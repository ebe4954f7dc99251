// The torch target: typed autocast wrappers + TORCH_LIBRARY_IMPL registration for a resolved
// policy, and its manifest. Returns text only; the caller writes it (OutputWriter).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "emit/templates.h"
#include "model/schema_set.h"
#include "model/torch_version.h"
#include "policy/policy.h"

namespace autocastgen::emit {

struct InputDigest {
  std::string name;  // as printed in @generated headers: relative to the working directory, else the file name
  std::string sha256;
};

// Whose autocast state the wrappers follow (Note [two states] in autocastgen/torch/policy_call.h):
// PyTorch's (torch.autocast) or autocastgen's own (AutocastScope). Spelled as `--state` takes it.
enum class WrapperState : uint8_t { torch, autocastgen };
[[nodiscard]] std::string_view spelling(WrapperState state);
[[nodiscard]] std::optional<WrapperState> parse_wrapper_state(std::string_view text);

// Note [shards]: `--shards N` splits the wrappers into N translation units that compile in
// parallel. Shard 1 is `autocast_<name>.cpp` (the only file when N is 1), shard k > 1 is
// `autocast_<name>.shard<k>.cpp`. The wrappers are cut, in policy order, into N contiguous groups
// whose sizes differ by at most one (the first ones take the remainder); a shard with no wrappers
// is still written, so a build knows the file names from N alone. Each shard includes only its own
// wrappers' op headers and registers them in its own TORCH_LIBRARY_IMPL blocks (the dispatcher
// takes several blocks for one namespace and key); what must exist once (the fallthrough
// fallback, the key claim of --state autocastgen) is in shard 1. `generate` removes the shard
// files of an earlier run with a larger N (cli/verb_generate.cpp), once the new set is written.
constexpr int kMaxShards = 64;

struct TorchTargetOptions {
  std::string name;              // names the outputs (`autocast_<name>.cpp`) and the C++ namespace
  int shards = 1;                // translation units the wrappers are split into (Note [shards]), 1..kMaxShards
  WrapperState state = WrapperState::torch;  // whose autocast state drives the wrappers
  bool fallthrough = true;       // register the fallthrough fallback for the key (when none exists)
  std::optional<model::TorchVersion> torch_version;  // the release generated for (@generated line, manifest)
  std::vector<InputDigest> inputs;
  // Where module patterns and sections are written (Note [precision by place] in policy/policy.h):
  // generated code names them as `file:line:col`; null: left empty.
  const SourceManager* sources = nullptr;
};

struct GeneratedFile {
  std::string path;  // relative to the output directory
  std::string content;
};

// Reports unmappable types and template problems; nullopt when there was any error.
[[nodiscard]] std::optional<std::vector<GeneratedFile>> emit_torch_target(const model::SchemaSet& schemas,
                                                                          const policy::ResolvedPolicy& policy,
                                                                          const TorchTargetOptions& options,
                                                                          const TemplateSet& templates,
                                                                          DiagnosticEngine& diags);

// The file name of shard `shard` (1-based) of `name`'s wrappers: `autocast_<name>.cpp` for shard
// 1, `autocast_<name>.shard<k>.cpp` after it (Note [shards]).
[[nodiscard]] std::string shard_file_name(const std::string& name, int shard);

// The shard number (> 1) when `file_name` is `autocast_<name>.shard<k>.cpp`, else nullopt.
[[nodiscard]] std::optional<int> shard_of_file_name(const std::string& name, std::string_view file_name);

// The manifest of a generated policy: every overload with its policy, canonical schema, wrapper
// symbol and dispatch key (also read back by `autocastgen audit`).
[[nodiscard]] nlohmann::ordered_json torch_manifest(const policy::ResolvedPolicy& policy, const TorchTargetOptions& options);

// `autocastgen::generated::<name>` with `name` made a C++ identifier.
[[nodiscard]] std::string generated_namespace(const std::string& name);

}  // namespace autocastgen::emit
