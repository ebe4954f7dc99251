// CUDA scaler ops and GradScaler on CUDA against PyTorch's CUDA ops and our CPU op; skip without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autocastgen/scaler/grad_scaler.h"
#include "autocastgen/scaler/ops.h"

namespace {

class ScalerOpsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU tests skipped";
  }
};

const at::TensorOptions kCuda = at::TensorOptions().device(at::kCUDA);

::testing::AssertionResult same_bits_or_both_nan(const at::Tensor& expected, const at::Tensor& actual) {
  const at::Tensor e = expected.cpu().contiguous().reshape({-1});
  const at::Tensor a = actual.cpu().contiguous().reshape({-1});
  const at::ScalarType bits = e.element_size() == 2 ? at::kShort : e.element_size() == 4 ? at::kInt : at::kLong;
  const at::Tensor ok = at::logical_or(e.view(bits) == a.view(bits), at::logical_and(e.isnan(), a.isnan()));
  if (ok.all().item<bool>()) return ::testing::AssertionSuccess();
  const int64_t i = at::logical_not(ok).nonzero()[0][0].item<int64_t>();
  return ::testing::AssertionFailure() << "element " << i << ": expected " << e[i].item<double>() << ", got "
                                       << a[i].item<double>();
}

std::vector<at::Tensor> random_list(at::ScalarType dtype, std::mt19937& rng, int count) {
  std::vector<at::Tensor> grads;
  for (int i = 0; i < count; ++i) {
    const int64_t n = static_cast<int64_t>(rng() % 300000);
    at::Tensor g = (at::randn({n}, at::kDouble) * at::pow(2.0, at::randint(-20, 16, {n}, at::kDouble))).to(dtype);
    if (n > 0 && rng() % 4 == 0) {
      const double bad[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()};
      g[static_cast<int64_t>(rng() % static_cast<unsigned>(n))] = bad[rng() % 3];
    }
    grads.push_back(g);
  }
  return grads;
}

// Our CUDA op against: PyTorch's CUDA op (float32/float16/float64), and our CPU op for every
// dtype (the CPU op itself matches PyTorch's CPU op bit for bit, see test_scaler_ops).
TEST_F(ScalerOpsCuda, MatchesPyTorchCudaAndOurCpuOp) {
  std::mt19937 rng(1);
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble}) {
    for (int round = 0; round < 4; ++round) {
      const auto host = random_list(dtype, rng, 1 + static_cast<int>(rng() % 30));
      std::vector<at::Tensor> ours;
      std::vector<at::Tensor> torch_cuda;
      std::vector<at::Tensor> ours_cpu;
      for (const auto& g : host) {
        ours.push_back(g.to(at::kCUDA));
        torch_cuda.push_back(g.to(at::kCUDA));
        ours_cpu.push_back(g.clone());
      }
      at::Tensor f_ours = at::zeros({}, kCuda);
      at::Tensor f_torch = at::zeros({}, kCuda);
      at::Tensor f_cpu = at::zeros({});
      const float inv = 1.0f / 3.0f;
      autocastgen::ops::non_finite_check_and_unscale_(ours, f_ours, at::full({}, inv, kCuda));
      autocastgen::ops::non_finite_check_and_unscale_(ours_cpu, f_cpu, at::full({}, inv));
      if (dtype != at::kBFloat16) {  // PyTorch's CUDA kernel has no bfloat16 (pytorch#127176)
        at::_amp_foreach_non_finite_check_and_unscale_(torch_cuda, f_torch, at::full({}, inv, kCuda));
        EXPECT_EQ(f_ours.item<float>(), f_torch.item<float>());
      }
      EXPECT_EQ(f_ours.item<float>(), f_cpu.item<float>());
      for (size_t i = 0; i < host.size(); ++i) {
        if (dtype != at::kBFloat16) {
          EXPECT_TRUE(same_bits_or_both_nan(torch_cuda[i], ours[i])) << c10::toString(dtype) << " " << i;
        }
        EXPECT_TRUE(same_bits_or_both_nan(ours_cpu[i], ours[i])) << c10::toString(dtype) << " " << i;
      }
    }
  }
}

TEST_F(ScalerOpsCuda, StridedGradientsAndDeviceErrors) {
  at::Tensor base = at::randn({64, 100}, kCuda);
  at::Tensor expected = base.clone();
  std::vector<at::Tensor> grads{base.slice(1, 0, 100, 7), at::randn({30, 40}, kCuda).t()};
  std::vector<at::Tensor> reference{grads[0].clone(), grads[1].clone()};
  at::Tensor found = at::zeros({}, kCuda);
  autocastgen::ops::non_finite_check_and_unscale_(grads, found, at::full({}, 0.5f, kCuda));
  EXPECT_TRUE(at::equal(grads[0], reference[0] * 0.5f));
  EXPECT_TRUE(at::equal(grads[1], reference[1] * 0.5f));
  expected.slice(1, 0, 100, 7).mul_(0.5f);
  EXPECT_TRUE(at::equal(base, expected));
  std::vector<at::Tensor> on_cpu{at::ones({3})};
  try {
    autocastgen::ops::non_finite_check_and_unscale_(on_cpu, found, at::full({}, 0.5f, kCuda));
    ADD_FAILURE() << "no error for a CPU gradient with a CUDA found_inf";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient 0 is on cpu but found_inf is on cuda:0"), std::string::npos) << e.what();
  }
}

TEST_F(ScalerOpsCuda, UpdateScaleMatchesPyTorchCuda) {
  std::mt19937 rng(2);
  std::bernoulli_distribution inf(0.2);
  at::Tensor s_ours = at::full({}, 65536.0f, kCuda);
  at::Tensor t_ours = at::zeros({}, kCuda.dtype(at::kInt));
  at::Tensor s_torch = s_ours.clone();
  at::Tensor t_torch = t_ours.clone();
  for (int i = 0; i < 1000; ++i) {
    const at::Tensor found = at::full({}, inf(rng) ? 1.0f : 0.0f, kCuda);
    autocastgen::ops::update_scale_(s_ours, t_ours, found, 1.1, 0.7, 3);
    at::_amp_update_scale_(s_torch, t_torch, found, 1.1, 0.7, 3);
  }
  EXPECT_EQ(s_ours.item<float>(), s_torch.item<float>());
  EXPECT_EQ(t_ours.item<int>(), t_torch.item<int>());
}

// The same training loop on CPU and on CUDA gives the same scale trajectory and parameters.
TEST_F(ScalerOpsCuda, GradScalerOnCudaFollowsTheCpuTrajectory) {
  std::mt19937 rng(3);
  std::bernoulli_distribution inject(0.1);
  at::Tensor p_cpu = at::zeros({1000}).set_requires_grad(true);
  at::Tensor p_cuda = at::zeros({1000}, kCuda).set_requires_grad(true);
  torch::optim::SGD o_cpu({p_cpu}, torch::optim::SGDOptions(0.01));
  torch::optim::SGD o_cuda({p_cuda}, torch::optim::SGDOptions(0.01));
  const auto opts = autocastgen::GradScalerOptions().init_scale(256.0).growth_interval(4).hysteresis(2);
  autocastgen::GradScaler s_cpu(autocastgen::GradScalerOptions(opts).device(c10::DeviceType::CPU));
  autocastgen::GradScaler s_cuda(autocastgen::GradScalerOptions(opts).device(c10::DeviceType::CUDA));
  ASSERT_TRUE(s_cuda.is_enabled());
  for (int i = 0; i < 300; ++i) {
    (void)s_cpu.scale(at::ones({}));
    (void)s_cuda.scale(at::ones({}, kCuda));
    at::Tensor g = at::randn({1000}) * static_cast<float>(s_cpu.get_scale());
    if (inject(rng)) g[static_cast<int64_t>(rng() % 1000)] = std::numeric_limits<float>::infinity();
    p_cpu.mutable_grad() = g.clone();
    p_cuda.mutable_grad() = g.to(at::kCUDA);
    EXPECT_EQ(s_cpu.step(o_cpu).has_value(), s_cuda.step(o_cuda).has_value()) << i;
    s_cpu.update();
    s_cuda.update();
    ASSERT_EQ(s_cpu.get_scale(), s_cuda.get_scale()) << i;
    ASSERT_EQ(s_cpu.get_hysteresis_left(), s_cuda.get_hysteresis_left()) << i;
  }
  EXPECT_TRUE(at::allclose(p_cpu.detach(), p_cuda.detach().cpu()));
}

}  // namespace
