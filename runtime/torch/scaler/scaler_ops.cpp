// The autocastgen scaler ops: schemas (TORCH_LIBRARY), their CPU and fake (Meta) kernels.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>

#include "autocastgen/kernels/scaler_cpu.h"
#include "autocastgen/scaler/ops.h"
#include "scaler_glue.h"

namespace autocastgen::torch_glue {
namespace {

// Note [CPU threads in the glue]
// The CPU kernel's workers run on the kernel library's persistent pool (Note [worker pool] in
// kernels/cpu/executor.cpp), as many as PyTorch's intra-op thread count allows
// (torch.set_num_threads is honoured), and on the calling thread alone inside a parallel region.
// Not on PyTorch's own pool through at::parallel_for, for two measured reasons (issue 14,
// bench/README.md):
// * at::parallel_for is a template in PyTorch's headers. With PyTorch's OpenMP pool (the pip
//   wheels) it runs in parallel only in a file compiled with OpenMP, and otherwise calls its body
//   once on the calling thread: this op used at::parallel_for and ran on one core.
// * Compiled with OpenMP (against PyTorch's libgomp), it ends every call with OpenMP's barrier,
//   which waits for every thread of the team, including one that has not had a core yet. On a
//   busy machine a thousand small gradients then took ~10 ms a call instead of ~2 ms on one
//   thread. The pool's caller waits only for helpers that joined, so a late helper costs nothing.
// The pool's threads sleep between calls, so next to PyTorch's idle intra-op threads they add no
// load, and no thread is started per call.
class TorchThreadsExecutor final : public kernels::Executor {
 public:
  std::int64_t workers_for(std::int64_t elements) const override {
    if (at::in_parallel_region()) return 1;
    return std::clamp<std::int64_t>(kernels::thread_executor().workers_for(elements), 1, at::get_num_threads());
  }
  void run(std::int64_t workers, const std::function<void(std::int64_t)>& body) const override {
    kernels::thread_executor().run(workers, body);
  }
};

}  // namespace

const kernels::Executor& cpu_executor() {
  static const TorchThreadsExecutor executor;
  return executor;
}

namespace {

void non_finite_check_and_unscale_cpu(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  check_unscale_scalars(found_inf, inv_scale, c10::DeviceType::CPU);
  StagedGrads staged(self, found_inf.device());
  // inv_scale is a checked one-element float CPU tensor: read it directly, not through item().
  kernels::non_finite_check_and_unscale_cpu(staged.spans(), found_inf.data_ptr<float>(),
                                            *inv_scale.const_data_ptr<float>(), {kernels::CpuIsa::Auto, &cpu_executor()});
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

// Fake kernels: the ops change values in place, never shapes, dtypes or devices.
void non_finite_check_and_unscale_meta(at::TensorList /*self*/, at::Tensor& /*found_inf*/,
                                       const at::Tensor& /*inv_scale*/) {}

at::Tensor& update_scale_meta(at::Tensor& self, at::Tensor& /*growth_tracker*/, const at::Tensor& /*found_inf*/,
                              double /*growth_factor*/, double /*backoff_factor*/, int64_t /*growth_interval*/) {
  return self;
}

at::Tensor& update_scale_hysteresis_meta(at::Tensor& self, at::Tensor& /*growth_tracker*/,
                                         at::Tensor& /*hysteresis_tracker*/, const at::Tensor& /*found_inf*/,
                                         double /*growth_factor*/, double /*backoff_factor*/,
                                         int64_t /*growth_interval*/, int64_t /*hysteresis*/, double /*min_scale*/,
                                         std::optional<double> /*max_scale*/) {
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

TORCH_LIBRARY_IMPL(autocastgen, Meta, m) {
  m.impl("non_finite_check_and_unscale_", TORCH_FN(autocastgen::torch_glue::non_finite_check_and_unscale_meta));
  m.impl("update_scale_", TORCH_FN(autocastgen::torch_glue::update_scale_meta));
  m.impl("update_scale_hysteresis_", TORCH_FN(autocastgen::torch_glue::update_scale_hysteresis_meta));
}
