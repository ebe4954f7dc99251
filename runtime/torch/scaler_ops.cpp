// The autocastgen scaler ops: schemas (TORCH_LIBRARY) and their CPU kernels (TORCH_LIBRARY_IMPL).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>

#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/scaler/ops.h"
#include "scaler_glue.h"

namespace autocastgen::torch_glue {
namespace {

// Note [PyTorch's thread pool]
// The CPU kernel's workers run on PyTorch's intra-op pool through at::parallel_for: no threads of
// our own next to PyTorch's (no oversubscription), none started per call, torch.set_num_threads
// is honoured, and inside a parallel region everything runs on the calling thread.
// at::parallel_for is a template in PyTorch's headers. When PyTorch's pool is OpenMP (the pip
// wheels), it only runs in parallel in a file compiled with OpenMP; without it, it calls the body
// once on the calling thread, and this op ran on one core while PyTorch's own op used all of
// them (issue 14). runtime/CMakeLists.txt compiles this file with OpenMP and links PyTorch's
// libgomp, and the check below keeps it that way.
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "scaler_ops.cpp must be compiled with OpenMP (-fopenmp): PyTorch's pool is OpenMP, and without it at::parallel_for runs serially"
#endif
class AtenExecutor final : public kernels::Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    if (at::in_parallel_region()) return 1;
    const std::int64_t useful = (elements + kernels::kCpuPieceElements - 1) / kernels::kCpuPieceElements;
    return std::clamp<std::int64_t>(useful, 1, at::get_num_threads());
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t w = begin; w < end; ++w) body(w);
    });
  }
};

}  // namespace

const kernels::Executor& aten_executor() {
  static const AtenExecutor executor;
  return executor;
}

namespace {

void non_finite_check_and_unscale_cpu(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  check_unscale_scalars(found_inf, inv_scale, c10::DeviceType::CPU);
  StagedGrads staged(self, found_inf.device());
  // inv_scale is a checked one-element float CPU tensor: read it directly, not through item().
  kernels::non_finite_check_and_unscale_cpu(staged.spans(), found_inf.data_ptr<float>(),
                                            *inv_scale.const_data_ptr<float>(), {kernels::CpuIsa::Auto, &aten_executor()});
  staged.copy_back();
}

at::Tensor& update_scale_cpu(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  const kernels::ScaleUpdateConfig cfg =
      check_update_args("autocastgen::update_scale_", self, growth_tracker, nullptr, found_inf, growth_factor,
                        backoff_factor, growth_interval, c10::DeviceType::CPU);
  kernels::update_scale_cpu(self.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(), nullptr,
                            *found_inf.const_data_ptr<float>(), cfg);
  return self;
}

at::Tensor& update_scale_hysteresis_cpu(at::Tensor& self, at::Tensor& growth_tracker, at::Tensor& hysteresis_tracker,
                                        const at::Tensor& found_inf, double growth_factor, double backoff_factor,
                                        int64_t growth_interval, int64_t hysteresis, double min_scale,
                                        std::optional<double> max_scale) {
  kernels::ScaleUpdateConfig cfg = check_update_args("autocastgen::update_scale_hysteresis_", self, growth_tracker,
                                                     &hysteresis_tracker, found_inf, growth_factor, backoff_factor,
                                                     growth_interval, c10::DeviceType::CPU);
  ops::apply_update_extras(cfg, hysteresis, min_scale, max_scale);
  kernels::update_scale_cpu(self.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                            hysteresis_tracker.data_ptr<int32_t>(), *found_inf.const_data_ptr<float>(), cfg);
  return self;
}

}  // namespace
}  // namespace autocastgen::torch_glue

// The first two schemas are those of aten::_amp_foreach_non_finite_check_and_unscale_ and
// aten::_amp_update_scale_, so the ops are drop-in replacements; the third adds the extras.
TORCH_LIBRARY(autocastgen, m) {
  m.def("non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf, Tensor inv_scale) -> ()");
  m.def(
      "update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf, float scale_growth_factor, "
      "float scale_backoff_factor, int growth_interval) -> Tensor(a!)");
  m.def(
      "update_scale_hysteresis_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor(c!) hysteresis_tracker, "
      "Tensor found_inf, float scale_growth_factor, float scale_backoff_factor, int growth_interval, "
      "int hysteresis=1, float min_scale=0., float? max_scale=None) -> Tensor(a!)");
}

// Note [autograd fallthrough]
// The ops are not differentiable. Without a kernel for the Autograd key the dispatcher would run
// PyTorch's boxed "autograd not implemented" fallback on every call, which turns a thousand-tensor
// list into IValues and back just to find that nothing requires grad (bench: host/dispatch_*).
// A fallthrough, which that fallback's own warning recommends for non-differentiable ops, skips
// the key. PyTorch's _amp_ ops behave the same way: no version counter bump, no error for a leaf
// that requires grad (tests/python/test_scaler.py pins both).
TORCH_LIBRARY_IMPL(autocastgen, Autograd, m) {
  m.impl("non_finite_check_and_unscale_", torch::CppFunction::makeFallthrough());
  m.impl("update_scale_", torch::CppFunction::makeFallthrough());
  m.impl("update_scale_hysteresis_", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(autocastgen, CPU, m) {
  m.impl("non_finite_check_and_unscale_", TORCH_FN(autocastgen::torch_glue::non_finite_check_and_unscale_cpu));
  m.impl("update_scale_", TORCH_FN(autocastgen::torch_glue::update_scale_cpu));
  m.impl("update_scale_hysteresis_", TORCH_FN(autocastgen::torch_glue::update_scale_hysteresis_cpu));
}
