// Which GEMMs of the fp8 list run in fp8: the recipe's `select:` (Note [fp8 selection] in
// runtime/torch/fp8/select.cpp, docs/fp8.md "Where fp8 pays").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Export.h>

#include "autocastgen/fp8/fp8.h"

namespace autocastgen::fp8 {

// A GEMM [M, K] x [K, N] as the selection sees it: metadata only.
struct GemmShape {
  std::int64_t m = 0;
  std::int64_t k = 0;
  std::int64_t n = 0;
  bool backward = false;  // its gradients will be computed (the backward GEMMs count too)
};

// Whether a GEMM the support rule takes runs in fp8 under `recipe.select`; `reason` (static text)
// says why not. all: always. auto: the built-in rule for the device class. measured: the decision
// measured on this device for the GEMM's shape class (measuring it first when it is new: real
// tensors of the shape, never the call's data; safe under tracing). `lower` is the dtype the GEMM
// runs in when not in fp8.
[[nodiscard]] TORCH_API Support select_gemm(const Recipe& recipe, c10::Device device, c10::ScalarType lower,
                                            const GemmShape& shape);

// The built-in rule of `select: auto` alone (what docs/fp8.md tabulates).
[[nodiscard]] TORCH_API Support auto_rule(c10::DeviceType device, Granularity granularity, const GemmShape& shape);

// One measured decision: the shape class, both times (milliseconds per forward + backward, summed
// over the ranks of the default process group when one is up) and the choice.
struct MeasuredChoice {
  std::string key;     // "cuda NVIDIA H100 80GB HBM3|tensorwise|bfloat16|M4096|K1024|N2816|backward"
  double fp8_ms = 0;
  double lower_ms = 0;
  bool fp8 = false;
  std::string source;  // "measured" (this process) or "file" (read from the cache file)
};
// This process's decisions, in the order they were made.
[[nodiscard]] TORCH_API std::vector<MeasuredChoice> measured_choices();
// Forgets this process's decisions (and, with `file`, deletes the cache files they came from).
TORCH_API void forget_measured_choices(bool file);
// The cache file for a device: $AUTOCASTGEN_FP8_SELECT_CACHE, else ~/.cache/autocastgen/fp8-select,
// then `<device class>-torch<version>.json`.
[[nodiscard]] TORCH_API std::string measured_cache_file(c10::Device device);

namespace detail {
// Set by the CUDA quantiser when the library loads: a CUDA device's name and capability
// ("NVIDIA H100 80GB HBM3 sm90"), the device class a measured decision holds for.
using DeviceNamer = std::string (*)(c10::DeviceIndex);
TORCH_API void set_cuda_device_namer(DeviceNamer namer);
}  // namespace detail

}  // namespace autocastgen::fp8
