// CPU grad-scaler kernels: fused multi-tensor unscale + non-finite check, and the scale update.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "autocastgen/kernels/grad_span.h"
#include "autocastgen/kernels/scaler_update.h"

namespace autocastgen::kernels {

// How the CPU kernel spreads work over cores. The torch glue passes one backed by
// at::parallel_for (PyTorch's thread pool and thread count); kernel-only users get threads of
// their own or run serially. The kernel starts `workers` bodies that pull fixed-size pieces from
// a shared counter until none is left (Note [dynamic pieces] in scaler_cpu.cpp).
class Executor {
 public:
  virtual ~Executor() = default;
  // How many workers are worth starting for `elements` elements (at least 1).
  virtual std::int64_t workers_for(std::int64_t elements) const = 0;
  // Calls body(w) for every w in [0, workers), possibly concurrently; returns when all are done
  // and rethrows an exception thrown by a body.
  virtual void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const = 0;
};

// Runs everything on the calling thread.
const Executor& serial_executor();
// Uses up to std::thread::hardware_concurrency() threads of a pool that is started on first use
// and kept (Note [worker pool] in executor.cpp), when the work is large enough to pay for waking
// them. Safe to call from several threads at once and from inside a body (those calls run serially).
const Executor& thread_executor();

// Instruction-set paths. Auto picks the best one the CPU supports; tests force the others.
enum class CpuIsa : std::uint8_t { Auto, Baseline, Avx2 };
CpuIsa best_cpu_isa();  // never Auto
const char* cpu_isa_name(CpuIsa isa);

struct UnscaleOptions {
  CpuIsa isa = CpuIsa::Auto;
  const Executor* executor = nullptr;  // nullptr: thread_executor()
};

// For every gradient: g = g * inv_scale (rounded to g's dtype), in place; sets *found_inf = 1.0f
// when any input element is inf or NaN, and otherwise leaves *found_inf untouched. Zero-size
// gradients and an empty list are fine. Throws std::invalid_argument for a malformed list, a null
// found_inf, or an ISA the CPU lacks.
void non_finite_check_and_unscale_cpu(std::span<const GradSpan> grads, float* found_inf,
                                      float inv_scale, const UnscaleOptions& options = {});

// One step of the update rule (Note [update rule] in scaler_update.h) on host memory.
// hysteresis_left may be null (then the rule is PyTorch's).
void update_scale_cpu(float* scale, std::int32_t* growth_tracker, std::int32_t* hysteresis_left,
                      float found_inf, const ScaleUpdateConfig& config);

// Size of the pieces the CPU kernel's workers take one at a time (elements).
inline constexpr std::int64_t kCpuPieceElements = 32768;

}  // namespace autocastgen::kernels
