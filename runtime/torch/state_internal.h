// Shared by the runtime's torch sources; not installed.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>
#include <ATen/core/operator_name.h>

#include <string>

#include "autocastgen/runtime/state.h"

namespace autocastgen::detail {

// The autocast dispatch key of `device`; throws c10::Error for a device type that has none.
c10::DispatchKey autocast_key(c10::DeviceType device);

// This thread's state of `device` in one thread-local lookup (the cast cache's hit path).
const DeviceAutocastState& thread_device_state(c10::DeviceType device);

}  // namespace autocastgen::detail

namespace autocastgen::detail {

// `ns::name[.overload]`, as runtime policies and key claims name an op.
std::string qualified_name(const c10::OperatorName& name);

// Whether `qualified` (`ns::name[.overload]`) has a runtime policy on `key` (runtime_policy.cpp).
bool has_runtime_policy(const std::string& qualified, c10::DispatchKey key);

}  // namespace autocastgen::detail
