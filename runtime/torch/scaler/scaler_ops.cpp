// The autocastgen scaler ops: schemas (TORCH_LIBRARY), their CPU and fake (Meta) kernels.
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

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

// Note [functionalising the scale update]
// update_scale_ and update_scale_hysteresis_ keep aten::_amp_update_scale_'s drop-in schema, which
// mutates two (three) arguments and returns an alias of the first. torch.compile's functionalisation
// rewrites a custom op that mutates only when it returns nothing (auto_functionalize), so these get
// what PyTorch generates for its own _amp_update_scale_: a functional twin (update_scale, returning
// the new tensors; clones updated in place by the mutating op) and a Functionalize kernel that runs
// the twin on the unwrapped tensors and writes the results back into the functional wrappers. The
// traced graph then holds the twin, and Inductor reinplaces or copies as it does for PyTorch's op.
std::tuple<at::Tensor, at::Tensor> update_scale_functional(const at::Tensor& self, const at::Tensor& growth_tracker,
                                                           const at::Tensor& found_inf, double growth_factor,
                                                           double backoff_factor, int64_t growth_interval) {
  at::Tensor scale = self.clone();
  at::Tensor tracker = growth_tracker.clone();
  ops::update_scale_(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval);
  return {scale, tracker};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> update_scale_hysteresis_functional(
    const at::Tensor& self, const at::Tensor& growth_tracker, const at::Tensor& hysteresis_tracker,
    const at::Tensor& found_inf, double growth_factor, double backoff_factor, int64_t growth_interval,
    int64_t hysteresis, double min_scale, std::optional<double> max_scale) {
  at::Tensor scale = self.clone();
  at::Tensor tracker = growth_tracker.clone();
  at::Tensor hysteresis_left = hysteresis_tracker.clone();
  ops::update_scale_hysteresis_(scale, tracker, hysteresis_left, found_inf, growth_factor, backoff_factor,
                                growth_interval, hysteresis, min_scale, max_scale);
  return {scale, tracker, hysteresis_left};
}

namespace functional = at::functionalization::impl;

// One Functionalize kernel's work for both ops. The mutated arguments must be all functional (the
// traced program's tensors) or none: with none, `eager()` runs the op as in eager mode; otherwise
// `twin(unwrapped mutated..., unwrapped found_inf)` runs below functionalisation and its results,
// the mutated arguments' new values in order, are written back into their wrappers.
template <std::size_t N, class Eager, class Twin>
at::Tensor& functionalised(const char* op, const std::array<at::Tensor*, N>& mutated, const at::Tensor& found_inf,
                           Eager&& eager, Twin&& twin) {
  std::size_t functional_count = 0;
  for (const at::Tensor* t : mutated) functional_count += functional::isFunctionalTensor(*t) ? 1 : 0;
  TORCH_CHECK(functional_count == 0 || functional_count == N, op,
              " under torch.compile: the scale and its trackers must all be tensors of the traced program, or none");
  TORCH_CHECK(functional_count > 0 || !functional::isFunctionalTensor(found_inf), op,
              " under torch.compile: found_inf is a tensor of the traced program but the scale is not");
  if (functional_count == 0) {
    at::AutoDispatchSkipFunctionalize skip;
    return eager();
  }
  const auto unwrapped = [](const at::Tensor& t) {
    if (!functional::isFunctionalTensor(t)) return t;
    functional::sync(t);
    return functional::from_functional_tensor(t);
  };
  std::array<at::Tensor, N> values;
  for (std::size_t i = 0; i < N; ++i) values[i] = unwrapped(*mutated[i]);
  const at::Tensor found = unwrapped(found_inf);
  const std::array<at::Tensor, N> results = [&] {
    at::AutoDispatchSkipFunctionalize skip;
    const auto tuple = std::apply([&](const auto&... value) { return twin(value..., found); }, values);
    return std::apply([](const auto&... result) { return std::array<at::Tensor, N>{result...}; }, tuple);
  }();
  for (std::size_t i = 0; i < N; ++i) {
    functional::replace_(*mutated[i], results[i]);
    functional::commit_update(*mutated[i]);
    functional::sync(*mutated[i]);
  }
  return *mutated[0];
}

at::Tensor& update_scale_functionalize(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  static const auto twin = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("autocastgen::update_scale", "")
                               .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                         const at::Tensor&, double, double, int64_t)>();
  return functionalised<2>(
      "autocastgen::update_scale_", {&self, &growth_tracker}, found_inf,
      [&]() -> at::Tensor& {
        return ops::update_scale_(self, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
      },
      [&](const at::Tensor& scale, const at::Tensor& tracker, const at::Tensor& found) {
        return twin.call(scale, tracker, found, growth_factor, backoff_factor, growth_interval);
      });
}

at::Tensor& update_scale_hysteresis_functionalize(at::Tensor& self, at::Tensor& growth_tracker,
                                                  at::Tensor& hysteresis_tracker, const at::Tensor& found_inf,
                                                  double growth_factor, double backoff_factor, int64_t growth_interval,
                                                  int64_t hysteresis, double min_scale,
                                                  std::optional<double> max_scale) {
  static const auto twin =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("autocastgen::update_scale_hysteresis", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                const at::Tensor&, double, double, int64_t, int64_t,
                                                                double, std::optional<double>)>();
  return functionalised<3>(
      "autocastgen::update_scale_hysteresis_", {&self, &growth_tracker, &hysteresis_tracker}, found_inf,
      [&]() -> at::Tensor& {
        return ops::update_scale_hysteresis_(self, growth_tracker, hysteresis_tracker, found_inf, growth_factor,
                                             backoff_factor, growth_interval, hysteresis, min_scale, max_scale);
      },
      [&](const at::Tensor& scale, const at::Tensor& tracker, const at::Tensor& hysteresis_left,
          const at::Tensor& found) {
        return twin.call(scale, tracker, hysteresis_left, found, growth_factor, backoff_factor, growth_interval,
                         hysteresis, min_scale, max_scale);
      });
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
  // Their functional twins (Note [functionalising the scale update]), as aten::_amp_update_scale.
  m.def(
      "update_scale(Tensor self, Tensor growth_tracker, Tensor found_inf, float scale_growth_factor, "
      "float scale_backoff_factor, int growth_interval) -> (Tensor, Tensor growth_tracker_out)");
  m.def(
      "update_scale_hysteresis(Tensor self, Tensor growth_tracker, Tensor hysteresis_tracker, Tensor found_inf, "
      "float scale_growth_factor, float scale_backoff_factor, int growth_interval, int hysteresis=1, "
      "float min_scale=0., float? max_scale=None) -> (Tensor, Tensor growth_tracker_out, "
      "Tensor hysteresis_tracker_out)");
}

TORCH_LIBRARY_IMPL(autocastgen, CompositeExplicitAutograd, m) {
  m.impl("update_scale", TORCH_FN(autocastgen::torch_glue::update_scale_functional));
  m.impl("update_scale_hysteresis", TORCH_FN(autocastgen::torch_glue::update_scale_hysteresis_functional));
}

TORCH_LIBRARY_IMPL(autocastgen, Functionalize, m) {
  m.impl("update_scale_", TORCH_FN(autocastgen::torch_glue::update_scale_functionalize));
  m.impl("update_scale_hysteresis_", TORCH_FN(autocastgen::torch_glue::update_scale_hysteresis_functionalize));
}

// Note [autograd fallthrough]
// The ops are not differentiable. Without a kernel for the Autograd key the dispatcher would run
// PyTorch's boxed "autograd not implemented" fallback on every call, which turns a thousand-tensor
// list into IValues and back just to find that nothing requires grad (bench: host/dispatch_*).
// A fallthrough, which that fallback's own warning recommends for non-differentiable ops, skips
// the key. PyTorch's _amp_ ops behave the same way: no version counter bump, no error for a leaf
// that requires grad (tests/python/grad_scaler/test_scaler.py pins both).
TORCH_LIBRARY_IMPL(autocastgen, Autograd, m) {
  m.impl("non_finite_check_and_unscale_", torch::CppFunction::makeFallthrough());
  m.impl("update_scale_", torch::CppFunction::makeFallthrough());
  m.impl("update_scale_hysteresis_", torch::CppFunction::makeFallthrough());
  m.impl("update_scale", torch::CppFunction::makeFallthrough());
  m.impl("update_scale_hysteresis", torch::CppFunction::makeFallthrough());
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
