// Policy names, the device table and counting helpers.
#include "policy/policy.h"

#include <algorithm>

#include <fmt/format.h>

namespace autocastgen::policy {

std::string_view spelling(PolicyKind policy) {
  switch (policy) {
    case PolicyKind::lower_precision_fp: return "lower_precision_fp";
    case PolicyKind::fp32: return "fp32";
    case PolicyKind::fp32_set_opt_dtype: return "fp32_set_opt_dtype";
    case PolicyKind::fp32_append_dtype: return "fp32_append_dtype";
    case PolicyKind::promote: return "promote";
    case PolicyKind::banned: return "banned";
    case PolicyKind::fp8: return "fp8";
  }
  return "fp32";
}

std::optional<PolicyKind> parse_policy_kind(std::string_view text) {
  for (PolicyKind policy : kAllPolicies)
    if (spelling(policy) == text) return policy;
  return std::nullopt;
}

std::string ReleaseGate::str() const {
  std::string out;
  if (since) out = "since " + since->str();
  if (until) out += (out.empty() ? "until " : ", until ") + until->str();
  return out;
}

std::string_view spelling(PolicySource source) {
  switch (source) {
    case PolicySource::policy_file: return "policy";
    case PolicySource::manifest: return "manifest";
    case PolicySource::cpp: return "C++";
  }
  return "policy";
}

size_t ResolvedPolicy::count(PolicyKind policy) const {
  return static_cast<size_t>(
      std::count_if(entries.begin(), entries.end(), [&](const ResolvedEntry& e) { return e.policy == policy; }));
}

std::vector<PolicyKind> ResolvedPolicy::reported_kinds() const {
  std::vector<PolicyKind> kinds;
  for (PolicyKind kind : kAllPolicies)
    if (kind != PolicyKind::fp8 || fp8 || count(PolicyKind::fp8) != 0) kinds.push_back(kind);
  return kinds;
}

std::string Fp8Recipe::str() const {
  std::string out = fmt::format("{{scaling: {}, granularity: {}, forward: {}, backward: {}", scaling, granularity, forward, backward);
  if (scaling == "delayed") out += fmt::format(", amax_history_len: {}", amax_history_len);
  return out + fmt::format(", margin: {}}}", margin);
}

const ResolvedEntry* ResolvedPolicy::find(std::string_view op) const {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const ResolvedEntry& e) { return e.op == op; });
  return it == entries.end() ? nullptr : &*it;
}

const std::vector<DeviceInfo>& autocast_devices() {
  // The devices c10 keeps an autocast dispatch key for (c10/core/DispatchKey.h).
  static const std::vector<DeviceInfo> devices = {
      {"cpu", "AutocastCPU", "bfloat16"},   {"cuda", "AutocastCUDA", "float16"}, {"xpu", "AutocastXPU", "float16"},
      {"ipu", "AutocastIPU", "float16"},    {"hpu", "AutocastHPU", "bfloat16"},  {"xla", "AutocastXLA", "bfloat16"},
      {"mps", "AutocastMPS", "float16"},    {"mtia", "AutocastMTIA", "float16"}, {"maia", "AutocastMAIA", "bfloat16"},
      {"privateuseone", "AutocastPrivateUse1", "float16"},
  };
  return devices;
}

}  // namespace autocastgen::policy
