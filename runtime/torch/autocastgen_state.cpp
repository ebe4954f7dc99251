// The autocastgen-state wrapper helpers: casts through autocastgen's cache, and the key claim.
#include "autocastgen/torch/autocastgen_state.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Logging.h>
#include <torch/library.h>

#include "cast_each.h"
#include "state_internal.h"

namespace autocastgen::torch::autocastgen_state {

namespace {

// One tensor, through this state's cache.
at::Tensor cast_one(const at::Tensor& tensor, at::ScalarType to, c10::DeviceType device) {
  return ::autocastgen::cached_cast(to, tensor, device);
}

}  // namespace

std::optional<at::Tensor> cast(const std::optional<at::Tensor>& tensor, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_optional(tensor, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

std::vector<at::Tensor> cast(at::TensorList tensors, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

std::vector<at::Tensor> cast(const at::ITensorListRef& tensors, at::ScalarType to, c10::DeviceType device) {
  return detail::cast_each(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

c10::List<std::optional<at::Tensor>> cast(const c10::List<std::optional<at::Tensor>>& tensors, at::ScalarType to,
                                          c10::DeviceType device) {
  return detail::cast_each_optional(tensors, [&](const at::Tensor& t) { return cast_one(t, to, device); });
}

at::ScalarType promote(at::ScalarType current, const at::Tensor& tensor, c10::DeviceType device) {
  if (!is_eligible(tensor, device)) return current;
  const at::ScalarType next = tensor.scalar_type();
  if (next == at::kDouble) return current;
  if (current == at::kFloat || next == at::kFloat) return at::kFloat;
  const at::ScalarType lower = ::autocastgen::autocast_dtype(device);
  TORCH_CHECK(current == lower && next == lower, "autocastgen: promote cannot choose between ", current, " and ", next,
              " (autocast's lower-precision dtype is ", lower, ")");
  return lower;
}

at::ScalarType promote(at::ScalarType current, at::TensorList tensors, c10::DeviceType device) {
  for (const at::Tensor& t : tensors) current = promote(current, t, device);
  return current;
}

at::ScalarType promote(at::ScalarType current, const at::ITensorListRef& tensors, c10::DeviceType device) {
  for (const at::Tensor& t : tensors) current = promote(current, t, device);
  return current;
}

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

}  // namespace autocastgen::torch::autocastgen_state
