// Rendering imported policies as policy-language YAML.
#include "import/policy_writer.h"

#include <algorithm>

#include <fmt/format.h>

#ifndef AUTOCASTGEN_VERSION
#define AUTOCASTGEN_VERSION "0"
#endif

namespace autocastgen::import {

using policy::PolicyKind;

std::string policy_yaml(const policy::ResolvedPolicy& policy, const std::vector<std::string>& sources,
                        const std::vector<std::string>& schema_files, const std::string& release) {
  std::string out = fmt::format("# Imported by autocastgen {} from the {} registrations in: {}\n", AUTOCASTGEN_VERSION,
                                policy.dispatch_key, fmt::join(sources, ", "));
  if (!release.empty())
    out += fmt::format("# Read with PyTorch {0}'s headers and schemas: check and audit it with --torch-version {0}.\n", release);
  if (!schema_files.empty())
    out += fmt::format("# Op schemas it needs besides PyTorch's: {} (audit: --extra-schemas FILE; check, generate: --schemas "
                       "after PyTorch's native_functions.yaml).\n",
                       fmt::join(schema_files, ", "));
  out += "# Review it, then make it a derived policy (docs/audit.md).\n";
  out += fmt::format("autocast:\n  device: {}\n  dispatch_key: {}\n", policy.device, policy.dispatch_key);
  if (!policy.lower_precision.empty()) {
    out += fmt::format("  lower_precision: [{}]\n", fmt::join(policy.lower_precision, ", "));
  } else {
    // C++ does not say the lower-precision dtypes, but a section's dtype must be one of them
    // (Note [precision by place]): the device's default, and the sections' dtypes.
    std::vector<std::string> dtypes;
    for (const policy::DeviceInfo& d : policy::autocast_devices())
      if (d.device == policy.device) dtypes.emplace_back(d.default_dtype);
    for (const policy::ModuleSection& s : policy.sections)
      if (s.kind == policy::SectionKind::dtype && std::find(dtypes.begin(), dtypes.end(), s.dtype) == dtypes.end()) dtypes.push_back(s.dtype);
    if (dtypes.size() > 1)
      out += fmt::format("  lower_precision: [{}]  # the device's default and the module sections' dtypes\n", fmt::join(dtypes, ", "));
  }
  if (policy.fp8) out += fmt::format("  fp8: {}\n", policy.fp8->str());
  out += "lists:\n";
  bool any = false;
  for (PolicyKind kind : policy::kAllPolicies) {
    if (policy.count(kind) == 0) continue;
    any = true;
    out += fmt::format("  {}:\n", policy::spelling(kind));
    for (const policy::ResolvedEntry& e : policy.entries) {
      if (e.policy != kind) continue;
      // A precision rule's keys (Note [precision rules]) follow the entry's own.
      const std::string rule = e.rule.str();
      const std::string keys = rule.empty() ? std::string() : ", " + rule.substr(1, rule.size() - 2);
      if (kind == PolicyKind::fp32_append_dtype && !e.redispatch_op.empty())
        out += fmt::format("    - {{op: {}, redispatch: {}{}}}\n", e.op, e.redispatch_op, keys);
      else if (kind == PolicyKind::banned)
        out += fmt::format("    - {{op: {}, message: {}{}}}\n", e.op, yaml_quoted(e.message), keys);
      else if (!keys.empty())
        out += fmt::format("    - {{op: {}{}}}\n", e.op, keys);
      else
        out += fmt::format("    - {}\n", e.op);
    }
  }
  if (!any) out += "  {}\n";
  if (!policy.sections.empty()) {
    out += "modules:\n";
    for (const policy::ModuleSection& s : policy.sections) out += fmt::format("  {}: {}\n", policy::pattern_spelling(s.pattern), s.value());
  }
  return out;
}

}  // namespace autocastgen::import
