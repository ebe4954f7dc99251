// Calls the backend's ops under CPU autocast and checks the dtypes the policy promises.
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <autocastgen/torch/policy_call.h>

int main() {
  auto& dispatcher = c10::Dispatcher::singleton();
  auto fused_linear = dispatcher.findSchemaOrThrow("mybackend::fused_linear", "")
                          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  auto scale = dispatcher.findSchemaOrThrow("mybackend::scale", "").typed<at::Tensor(const at::Tensor&, double)>();

  const at::Tensor x = at::randn({4, 8});
  const at::Tensor w = at::randn({3, 8});
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const at::Tensor y = fused_linear.call(x, w, std::nullopt);
  const at::Tensor z = scale.call(y, 2.0);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();

  std::cout << "mybackend::fused_linear ran in " << y.scalar_type() << "; mybackend::scale ran in " << z.scalar_type()
            << "; last generated wrapper: " << autocastgen::torch::wrapper_trace().last_op << "\n";
  const bool ok = y.scalar_type() == at::kBFloat16 && z.scalar_type() == at::kFloat &&
                  std::string(autocastgen::torch::wrapper_trace().last_op) == "mybackend::scale";
  std::cout << (ok ? "consumer: ok" : "consumer: FAILED") << "\n";
  return ok ? 0 : 1;
}
