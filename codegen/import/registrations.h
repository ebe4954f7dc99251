// What the importer reads off a translation unit, as plain data that outlives the AST: each
// m.impl registration, the TORCH_LIBRARY_IMPL blocks found and the module sections. No Clang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "policy/policy.h"
#include "support/source_manager.h"

namespace autocastgen::import::detail {

// A precision rule read off a generated wrapper (Note [precision rules] in policy/policy.h): the
// wrapper's parameters by position and its literals as the policy language writes them; they get
// argument names, and are checked, against the op's schema when the registration is resolved.
struct ImportedCondition {
  size_t index;
  bool negated;                                  // unless:
  std::vector<std::optional<std::string>> values;  // nullopt: null
};
struct ImportedRule {
  std::vector<std::string> dtypes;
  std::vector<std::string> modules;  // Note [precision by place]: the patterns of `k...Modules<N>.match()`
  std::vector<ImportedCondition> conditions;
  std::vector<std::pair<size_t, policy::ArgCast>> casts;
};

// One m.impl registration for one block's key (one entry of it, for a wrapper with precision rules).
struct Registration {
  std::string dispatch_key;
  std::string block_ns;
  std::string op_text;  // as written: `mm`, `aten::mm`, `norm.Scalar`
  SourceLocation location;
  uint32_t length = 1;
  policy::PolicyKind policy = policy::PolicyKind::fp32;
  std::string redispatch_ops;  // at::_ops struct the fp32_append_dtype kernel calls
  std::string redispatch_qualified;  // or the overload outside aten it calls
  std::string calls_ops;       // at::_ops struct the kernel calls (for the consistency check)
  std::string message;         // banned
  std::string kernel_device;   // c10::DeviceType the wrapper template casts for (KERNEL_* only)
  ImportedRule rule;           // one entry of a wrapper with precision rules
};

// A generated file's `modules:` section (rt::ModuleSections; Note [precision by place]).
struct ImportedSections {
  std::string device_type;  // the c10::DeviceType enumerator: CPU, CUDA, ...
  std::vector<policy::ModuleSection> sections;
  SourceLocation location;
};

// A TORCH_LIBRARY_IMPL block of an autocast key, and what its m.impl calls were (an empty block
// imports as an empty policy, with a note naming it).
struct FoundBlock {
  std::string dispatch_key;
  SourceLocation location;
  size_t kernels = 0;       // m.impl calls other than fallthroughs (kept or left out)
  size_t fallthroughs = 0;  // m.impl(name, makeFallthrough())
};

}  // namespace autocastgen::import::detail
