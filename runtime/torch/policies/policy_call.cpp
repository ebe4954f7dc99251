// The out-of-line parts of the per-policy drivers (policy_call.h): eligibility, promotion,
// banned-op errors, the call trace, and the registrations generated files make.
#include "autocastgen/torch/policy_call.h"

#include <map>
#include <mutex>
#include <set>
#include <string>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/library.h>

#include "state/state_internal.h"

namespace autocastgen::torch {

// Every driver call starts here (Call's constructor), so this is also where a trace learns that
// its graph read the autocast state (Note [reads while tracing] in traced.cpp).
WrapperTrace& wrapper_trace() {
  thread_local WrapperTrace trace;
  const bool untouched = ::autocastgen::detail::note_driver_call_if_traced();
  if (C10_UNLIKELY(untouched != trace.untouched)) trace.untouched = untouched;
  return trace;
}

bool is_eligible(const at::Tensor& tensor, c10::DeviceType device) { return at::autocast::is_eligible(tensor, device); }

at::ScalarType torch_promote_type(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
  return at::autocast::prioritize(current, tensor, device);
}

at::ScalarType own_promote_type(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
  if (!is_eligible(tensor, device)) return current;
  const at::ScalarType next = tensor.scalar_type();
  if (next == at::kDouble) return current;
  if (current == at::kFloat || next == at::kFloat) return at::kFloat;
  const at::ScalarType lower = ::autocastgen::autocast_dtype(device);
  TORCH_CHECK(current == lower && next == lower, "autocastgen: promote cannot choose between ", current, " and ", next,
              " (autocast's lower-precision dtype is ", lower, ")");
  return lower;
}

void raise_banned(const char* op, std::string_view message) {
  (void)op;  // the message is raised exactly as the policy wrote it, as PyTorch's own banned kernels do
  TORCH_CHECK(false, std::string(message));
}

FallthroughRegistration::FallthroughRegistration(c10::DispatchKey key) {
  // Static initialisers of several generated libraries may race; the check and the registration
  // must be one step.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) return;
  library_ = std::make_unique<::torch::Library>(::torch::Library::IMPL, "_", key, __FILE__, __LINE__);
  library_->fallback(::torch::CppFunction::makeFallthrough());
}

FallthroughRegistration::~FallthroughRegistration() = default;

GeneratedLibraryNote::GeneratedLibraryNote(const char* identity) { ::autocastgen::detail::note_generated_library(identity); }

DispatchKeyClaim::DispatchKeyClaim(c10::DispatchKey key, std::initializer_list<std::string_view> listed_ops) {
  const std::set<std::string_view> listed(listed_ops.begin(), listed_ops.end());
  std::map<std::string, std::vector<std::string>> unlisted;  // namespace -> `name[.overload]`
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getRegistrationsForDispatchKey(key)) {
    const std::string qualified = ::autocastgen::detail::qualified_name(op);
    if (listed.count(qualified) || ::autocastgen::detail::has_runtime_policy(qualified, key)) continue;
    const size_t colons = op.name.find("::");
    if (colons == std::string::npos) continue;
    unlisted[op.name.substr(0, colons)].push_back(qualified.substr(colons + 2));
  }
  size_t count = 0;
  for (const auto& [ns, ops] : unlisted) {
    auto library = std::make_unique<::torch::Library>(::torch::Library::IMPL, ns, key, __FILE__, __LINE__);
    for (const std::string& op : ops) library->impl(op.c_str(), ::torch::CppFunction::makeFallthrough());
    count += ops.size();
    libraries_.push_back(std::move(library));
  }
  if (count != 0)
    LOG(WARNING) << "autocastgen: " << count << " op(s) outside the policy had kernels on " << key
                 << "; they fall through while this autocastgen-state library is loaded";
}

DispatchKeyClaim::~DispatchKeyClaim() = default;

}  // namespace autocastgen::torch
