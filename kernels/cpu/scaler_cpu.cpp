// CPU grad-scaler kernels: work partitioning over the gradient list, ISA dispatch, baseline loops.
#include "autocastgen/kernels/scaler_cpu.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "span_kernels.h"

#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
#include <cpuid.h>
#endif

namespace autocastgen::kernels {
namespace detail {
namespace {

// The baseline path: ScalarLane<D> one element at a time (what the GPU runs per element).
template <DType D>
bool run_span_scalar(void* data, std::int64_t n, float inv, bool write) {
  using L = ScalarLane<D>;
  auto* p = static_cast<typename L::Stored*>(data);
  typename L::Flag acc = 0;
  if (write) {
    const typename L::Wide vinv = L::broadcast(inv);
    for (std::int64_t i = 0; i < n; ++i) p[i] = unscale_value<L>(p[i], vinv, acc);
  } else {
    for (std::int64_t i = 0; i < n; ++i) check_value<L>(p[i], acc);
  }
  return acc != 0;
}

}  // namespace

const SpanKernels& baseline_span_kernels() {
  static const SpanKernels kernels{{&run_span_scalar<DType::Float32>, &run_span_scalar<DType::Float16>,
                                    &run_span_scalar<DType::BFloat16>, &run_span_scalar<DType::Float64>}};
  return kernels;
}

}  // namespace detail

namespace {

bool cpu_has_avx2() {
#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
  // The builtin's checks include the OS saving YMM state. F16C from CPUID: clang before 15 has no
  // "f16c" name for the builtin (the fuzz preset's clang-14).
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return has;
#else
  return false;
#endif
}

const detail::SpanKernels& span_kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx2:
#if defined(AUTOCASTGEN_KERNELS_HAVE_AVX2)
      if (cpu_has_avx2()) return detail::avx2_span_kernels();
#endif
      throw_invalid_argument(
          "autocastgen::kernels::non_finite_check_and_unscale_cpu: CpuIsa::Avx2 was requested but "
          "this CPU (or this build) has no AVX2+FMA+F16C");
    case CpuIsa::Baseline:
      return detail::baseline_span_kernels();
    case CpuIsa::Auto:
      break;
  }
  return span_kernels_for(best_cpu_isa());
}

}  // namespace

CpuIsa best_cpu_isa() { return cpu_has_avx2() ? CpuIsa::Avx2 : CpuIsa::Baseline; }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Auto: return "auto";
    case CpuIsa::Baseline: return "baseline";
    case CpuIsa::Avx2: return "avx2";
  }
  return "unknown";
}

void non_finite_check_and_unscale_cpu(std::span<const GradSpan> grads, float* found_inf,
                                      float inv_scale, const UnscaleOptions& options) {
  static constexpr const char* kWho = "autocastgen::kernels::non_finite_check_and_unscale_cpu";
  validate_grad_spans(grads, kWho);
  if (found_inf == nullptr) throw_invalid_argument(std::string(kWho) + ": found_inf is null");
  const detail::SpanKernels& kernels = span_kernels_for(options.isa);
  const bool write = unscale_writes(inv_scale);

  // offsets[g] is the position of gradient g in the concatenation of all gradients; the work is
  // cut into pieces of that concatenation, so small tensors are packed and large ones split.
  std::vector<std::int64_t> offsets(grads.size() + 1, 0);
  for (std::size_t g = 0; g < grads.size(); ++g) offsets[g + 1] = offsets[g] + grads[g].numel;
  const std::int64_t total = offsets.back();
  if (total == 0) return;

  std::atomic<bool> any_nonfinite{false};
  const auto process = [&](std::int64_t begin, std::int64_t end) -> bool {
    // The last gradient starting at or before `begin`; empty gradients are skipped this way.
    auto g = static_cast<std::size_t>(
        std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin() - 1);
    bool local = false;
    while (begin < end && g < grads.size()) {
      const std::int64_t stop = std::min(end, offsets[g + 1]);
      if (stop > begin) {
        const GradSpan& span = grads[g];
        auto* base = static_cast<unsigned char*>(span.data) +
                     static_cast<std::size_t>(begin - offsets[g]) * dtype_size(span.dtype);
        local |= kernels.by_dtype[static_cast<int>(span.dtype)](base, stop - begin, inv_scale, write);
        begin = stop;
      }
      ++g;
    }
    return local;
  };

  if (write && grad_spans_overlap(grads)) {
    any_nonfinite = process(0, total);  // in list order, see grad_spans_overlap()
  } else {
    // Note [dynamic pieces]
    // Workers take kCpuPieceElements-long pieces of the concatenated list from a shared counter,
    // instead of one fixed share each: when a core is busy with something else (other threads
    // of the training job, other processes) the other workers take over its pieces, so one slow
    // core does not hold up the whole call.
    const Executor& executor = options.executor != nullptr ? *options.executor : thread_executor();
    const std::int64_t pieces = (total + kCpuPieceElements - 1) / kCpuPieceElements;
    const std::int64_t workers = std::clamp<std::int64_t>(executor.workers_for(total), 1, pieces);
    std::atomic<std::int64_t> next_piece{0};
    executor.run(workers, [&](std::int64_t) {
      bool local = false;
      for (std::int64_t p = next_piece.fetch_add(1, std::memory_order_relaxed); p < pieces;
           p = next_piece.fetch_add(1, std::memory_order_relaxed)) {
        local |= process(p * kCpuPieceElements, std::min(total, (p + 1) * kCpuPieceElements));
      }
      if (local) any_nonfinite.store(true, std::memory_order_relaxed);
    });
  }
  // One write, from the calling thread, after all pieces are done.
  if (any_nonfinite.load(std::memory_order_relaxed)) *found_inf = 1.0f;
}

void update_scale_cpu(float* scale, std::int32_t* growth_tracker, std::int32_t* hysteresis_left,
                      float found_inf, const ScaleUpdateConfig& config) {
  if (scale == nullptr || growth_tracker == nullptr) {
    throw_invalid_argument("autocastgen::kernels::update_scale_cpu: scale and growth_tracker must not be null");
  }
  update_scale_step(scale, growth_tracker, hysteresis_left, found_inf, config);
}

}  // namespace autocastgen::kernels
