// Mixed-precision training on CPU: a small conv net trained with bf16 autocast through autocastgen's
// generated AutocastCPU wrappers, next to the same run in fp32 from the same initial weights.
// Built twice: with the cpu policy generated for PyTorch's autocast state (turned on as
// torch.autocast does), and, with AUTOCASTGEN_OWN_STATE, generated with --state autocastgen and
// turned on by autocastgen::AutocastScope.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <autocastgen/runtime/state.h>
#include <autocastgen/torch/policy_call.h>

namespace {

struct Params {
  at::Tensor conv_w, conv_b, fc_w, fc_b;
  std::vector<at::Tensor> all() const { return {conv_w, conv_b, fc_w, fc_b}; }
};

Params init_params() {
  at::manual_seed(0);
  auto leaf = [](at::Tensor t) { return t.set_requires_grad(true); };
  return {leaf(at::randn({8, 1, 3, 3}) * 0.3), leaf(at::zeros({8})), leaf(at::randn({10, 8 * 10 * 10}) * 0.03),
          leaf(at::zeros({10}))};
}

// Runs `f`, and when `trace` is set prints the op, its output dtype, and who handled the call.
template <typename F>
at::Tensor op(const char* name, bool trace, F f) {
  const uint64_t before = autocastgen::torch::wrapper_trace().calls;
  at::Tensor out = f();
  if (trace) {
    const bool generated = autocastgen::torch::wrapper_trace().calls != before;
    std::printf("  %-12s -> %-9s %s\n", name, std::string(c10::toString(out.scalar_type())).c_str(),
                generated ? (std::string("(generated wrapper ") + autocastgen::torch::wrapper_trace().last_op + ")").c_str()
                          : "(not in the policy: runs in its inputs' dtype)");
  }
  return out;
}

at::Tensor loss_of(const Params& p, const at::Tensor& x, const at::Tensor& y, bool trace) {
  at::Tensor h = op("conv2d", trace, [&] { return at::conv2d(x, p.conv_w, p.conv_b); });
  h = op("relu", trace, [&] { return at::relu(h); });
  h = op("flatten", trace, [&] { return h.flatten(1); });
  at::Tensor logits = op("linear", trace, [&] { return at::linear(h, p.fc_w, p.fc_b); });
  at::Tensor logp = op("log_softmax", trace, [&] { return at::log_softmax(logits, 1); });
  return op("nll_loss", trace, [&] { return at::nll_loss(logp, y); });
}

std::vector<double> train(bool autocast, int steps, const at::Tensor& x, const at::Tensor& y) {
  Params p = init_params();
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    if (autocast && step == 0) std::printf("one bf16 autocast step, op by op:\n");
#ifdef AUTOCASTGEN_OWN_STATE
    std::optional<autocastgen::AutocastScope> scope;
    if (autocast) scope.emplace(at::kCPU, at::kBFloat16);
    at::Tensor loss = loss_of(p, x, y, autocast && step == 0);
    scope.reset();  // restores the state and clears the cast cache
#else
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, autocast);
    at::Tensor loss = loss_of(p, x, y, autocast && step == 0);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();  // as leaving torch.autocast does
#endif
    loss.backward();
    {
      at::NoGradGuard no_grad;
      for (at::Tensor& t : p.all()) {
        t.sub_(t.grad() * 0.5);
        t.mutable_grad().zero_();
      }
    }
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);

  // A learnable synthetic task: labels from a fixed random teacher.
  at::manual_seed(1);
  const at::Tensor x = at::randn({64, 1, 12, 12});
  const at::Tensor y = at::matmul(x.flatten(1), at::randn({144, 10})).argmax(1);

  const std::vector<double> mixed = train(true, steps, x, y);
  const std::vector<double> full = train(false, steps, x, y);

  std::printf("\n| step | loss fp32 | loss bf16 autocast | relative difference |\n|---|---|---|---|\n");
  for (int step = 0; step < steps; step += std::max(1, steps / 8))
    std::printf("| %d | %.4f | %.4f | %.2f%% |\n", step, full[step], mixed[step],
                100.0 * std::abs(mixed[step] - full[step]) / full[step]);
  const double last = 100.0 * std::abs(mixed.back() - full.back()) / full.back();
  std::printf("| %d | %.4f | %.4f | %.2f%% |\n", steps - 1, full.back(), mixed.back(), last);

  const bool learned = mixed.back() < 0.5 * mixed.front() && full.back() < 0.5 * full.front();
  const bool finite = std::isfinite(mixed.back());
  std::printf("\ntrain: %s (bf16 loss %.4f -> %.4f; fp32 loss %.4f -> %.4f)\n", learned && finite ? "ok" : "FAILED",
              mixed.front(), mixed.back(), full.front(), full.back());
  return learned && finite ? 0 : 1;
}
