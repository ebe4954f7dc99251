// How many c10::DeviceType values there are (internal): the per-device tables of the state, the
// cast cache, the module sections and fp8 have one slot each, indexed by the enum's value.
#pragma once

#include <cstddef>

#include <c10/core/DeviceType.h>

namespace autocastgen {

inline constexpr std::size_t kDeviceTypes = static_cast<std::size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);

}  // namespace autocastgen
