// The boxed fallback that makes every other op work on mydevice: copy the arguments to the host,
// run the CPU kernel, copy written arguments back and results to the device.
#include "mydevice.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace mydevice {
namespace {

bool on_device(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

// One argument, host side: device tensors (alone or in lists) become host copies, a device argument
// naming mydevice (factory functions) names the CPU. Everything else is passed as it is.
c10::IValue to_host(const c10::IValue& value) {
  if (value.isTensor()) return on_device(value.toTensor()) ? c10::IValue(to_cpu(value.toTensor())) : value;
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(on_device(t) ? to_cpu(t) : t);
    return out;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : value.toOptionalTensorList())
      out.push_back(t && on_device(*t) ? std::optional<at::Tensor>(to_cpu(*t)) : t);
    return out;
  }
  if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(c10::kCPU);
  return value;
}

// A written argument: the host copy's new contents go back into the device tensor (resized first
// when the kernel resized an out= argument).
void write_back(const at::Tensor& device_tensor, const at::Tensor& host_tensor) {
  if (!on_device(device_tensor)) return;
  if (device_tensor.sizes() != host_tensor.sizes()) device_tensor.resize_(host_tensor.sizes());
  host_alias(device_tensor).copy_(host_tensor);
}

void write_back(const c10::IValue& device_value, const c10::IValue& host_value) {
  if (device_value.isTensor()) {
    write_back(device_value.toTensor(), host_value.toTensor());
  } else if (device_value.isTensorList()) {
    const c10::List<at::Tensor> device_list = device_value.toTensorList();
    const c10::List<at::Tensor> host_list = host_value.toTensorList();
    for (size_t i = 0; i < device_list.size(); ++i) write_back(device_list.get(i), host_list.get(i));
  }
}

c10::IValue to_device_result(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() && t.device().is_cpu() ? c10::IValue(to_device(t)) : value;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(t.device().is_cpu() ? to_device(t) : t);
    return out;
  }
  return value;
}

thread_local bool in_fallback = false;

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  TORCH_CHECK(!in_fallback, "mydevice: ", schema.operator_name(),
              " reached the fallback again from its own CPU call (an argument stayed on mydevice)");
  const size_t count = schema.arguments().size();
  const auto first = static_cast<std::ptrdiff_t>(stack->size() - count);
  const std::vector<c10::IValue> device_args(stack->begin() + first, stack->end());
  std::vector<c10::IValue> host_args;
  host_args.reserve(count);
  for (const c10::IValue& value : device_args) host_args.push_back(to_host(value));
  std::copy(host_args.begin(), host_args.end(), stack->begin() + first);
  {
    // Only the CPU kernel runs: autocast of the CPU (should it be on) is not this op's business.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    in_fallback = true;
    struct Reset {
      ~Reset() { in_fallback = false; }
    } reset;
    op.callBoxed(stack);
  }
  for (size_t i = 0; i < count; ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) write_back(device_args[i], host_args[i]);
  }
  const size_t results = schema.returns().size();
  for (size_t j = 0; j < results; ++j) {
    c10::IValue& result = (*stack)[stack->size() - results + j];
    const c10::AliasInfo* alias = schema.returns()[j].alias_info();
    if (alias == nullptr) {
      result = to_device_result(result);
      continue;
    }
    // A result that is a written argument (in-place and out= ops) is the caller's device tensor.
    TORCH_CHECK(alias->isWrite(), "mydevice: the view op ", schema.operator_name(),
                " needs a mydevice kernel: through the copying fallback its result would not share memory");
    for (size_t i = 0; i < count; ++i) {
      const c10::AliasInfo* argument = schema.arguments()[i].alias_info();
      if (argument != nullptr && argument->beforeSets() == alias->beforeSets()) result = device_args[i];
    }
  }
}

// Note [functional kernels]: PyTorch prefers composite kernels to a backend fallback, and two kinds
// would make mydevice differ from the CPU:
// - CompositeExplicitAutogradNonFunctional kernels (structured ops: add, mm, mse_loss, ...)
//   allocate the result on mydevice and call the op's out= variant, which reaches the fallback with
//   an extra copy of the empty result, and for some ops a deprecation warning of the CPU out=
//   kernel (mse_loss resizes a scalar out);
// - ops with a CPU kernel and a CompositeExplicitAutograd one for other devices (native_layer_norm,
//   native_group_norm, addr, ...) compute differently from the CPU kernel.
// So the fallback is also registered as mydevice's own kernel of those ops: they run the CPU kernel
// directly, and mydevice's results are the CPU's. A backend with real kernels registers them for
// these ops instead.
bool prefers_cpu_kernel(const c10::OperatorHandle& op) {
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
         (op.hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
          op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd));
}

std::unique_ptr<torch::Library> register_cpu_kernels() {
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                                  __FILE__, __LINE__);
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !prefers_cpu_kernel(*op)) continue;
    const std::string unqualified = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  }
  return library;
}

const std::unique_ptr<torch::Library> cpu_kernels = register_cpu_kernels();

}  // namespace
}  // namespace mydevice

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&mydevice::cpu_fallback>());
}
