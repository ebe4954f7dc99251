// The fp8 library's C++ API: recipe, support rule, GEMM vs a _scaled_mm reference, cache, delayed state.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include "autocastgen/fp8/fp8.h"
#include "autocastgen/torch/compat.h"

namespace autocastgen::fp8 {
namespace {

at::Tensor weight(std::int64_t out, std::int64_t in, int seed) {
  at::manual_seed(seed);
  return (at::randn({out, in}) * 0.1).requires_grad_(true);
}

at::Tensor input(std::int64_t m, std::int64_t k, int seed) {
  at::manual_seed(seed);
  return at::randn({m, k});
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// PyTorch-ops quantisation, from the documented rule.
std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& x, c10::ScalarType fp8) {
  const double max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const double amax = x.detach().abs().max().item<double>();
  const auto scale = at::scalar_tensor(static_cast<float>(max / amax));
  return {(x.detach().to(at::kFloat) * scale).clamp(-max, max).to(fp8), scale.reciprocal()};
}

// The reference GEMM: PyTorch's own _scaled_mm.
at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& sa, const at::Tensor& sb,
                     c10::ScalarType out_dtype, bool fast_accum = false) {
  return autocastgen::torch::compat::scaled_mm(a, b, sa, sb, std::nullopt, out_dtype, fast_accum);
}

// Whether this PyTorch has a CPU _scaled_mm (2.11 and 2.15 have one; 2.4 and 2.7 do not).
bool cpu_scaled_mm() {
  const auto op = c10::Dispatcher::singleton().findOp({"aten::_scaled_mm", ""});
  return op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

class Fp8Runtime : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_weight_cache(c10::DeviceType::CPU);
    reset_weight_cache_stats(c10::DeviceType::CPU);
    reset_delayed_scaling_state();
  }
};

// The tests that run fp8 GEMMs on the CPU: skipped where this PyTorch has no CPU _scaled_mm.
class Fp8Gemm : public Fp8Runtime {
 protected:
  void SetUp() override {
    if (!cpu_scaled_mm()) GTEST_SKIP() << "this PyTorch " << TORCH_VERSION << " has no CPU _scaled_mm kernel";
    Fp8Runtime::SetUp();
  }
};

TEST_F(Fp8Runtime, NoCpuScaledMmMeansNoFp8) {
  if (cpu_scaled_mm()) GTEST_SKIP() << "this PyTorch has a CPU _scaled_mm kernel";
  const Support support = fp8_linear_support(input(32, 64, 1), weight(48, 64, 0), std::nullopt, at::kBFloat16);
  EXPECT_FALSE(support);
  EXPECT_EQ(std::string(support.reason), "this device's PyTorch has no _scaled_mm kernel");
}

TEST_F(Fp8Runtime, RecipeValidationAndText) {
  Recipe r;
  EXPECT_NO_THROW(r.validate());
  EXPECT_EQ(r.str(), "{scaling: current, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2, margin: 0}");
  r.scaling = Scaling::Delayed;
  r.amax_history_len = 1024;
  EXPECT_EQ(r.str(),
            "{scaling: delayed, granularity: tensorwise, forward: float8_e4m3fn, backward: float8_e5m2, "
            "amax_history_len: 1024, margin: 0}");
  const auto fails = [](Recipe bad, const std::string& needle) {
    const std::string message = error_of([&] { bad.validate(); });
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  Recipe bad;
  bad.forward_dtype = at::kFloat8_e5m2;
  fails(bad, "forward must be float8_e4m3fn");
  bad = Recipe{};
  bad.backward_dtype = at::kBFloat16;
  fails(bad, "backward must be float8_e5m2 or float8_e4m3fn, got BFloat16");
  bad = Recipe{};
  bad.amax_history_len = 0;
  fails(bad, "amax_history_len must be in [1, 65536], got 0");
  bad = Recipe{};
  bad.margin = -1;
  fails(bad, "margin must be in [0, 64], got -1");
  EXPECT_EQ(parse_scaling("delayed"), Scaling::Delayed);
  EXPECT_EQ(parse_scaling("Delayed"), std::nullopt);
  EXPECT_EQ(parse_granularity("tensorwise"), Granularity::Tensorwise);
  EXPECT_EQ(parse_granularity("rowwise"), Granularity::Rowwise);
  EXPECT_EQ(parse_granularity("rowwise_with_gw_hp"), Granularity::RowwiseWithGwHp);
  EXPECT_EQ(parse_granularity("colwise"), std::nullopt);
  EXPECT_STREQ(granularity_name(Granularity::RowwiseWithGwHp), "rowwise_with_gw_hp");
  Recipe rw;
  rw.granularity = Granularity::Rowwise;
  EXPECT_THROW(rw.validate(), c10::Error);  // the default backward, e5m2, is refused with row-wise scales
  rw.backward_dtype = c10::ScalarType::Float8_e4m3fn;
  EXPECT_NO_THROW(rw.validate());
  EXPECT_EQ(rw.str(), "{scaling: current, granularity: rowwise, forward: float8_e4m3fn, backward: float8_e4m3fn, margin: 0}");
  rw.scaling = Scaling::Delayed;
  EXPECT_THROW(rw.validate(), c10::Error);  // delayed row-wise scales are not implemented
  EXPECT_EQ(parse_fp8_dtype("float8_e5m2"), at::kFloat8_e5m2);
  EXPECT_EQ(parse_fp8_dtype("float8_e4m3fnuz"), std::nullopt);
}

TEST_F(Fp8Gemm, SupportRule) {
  const at::Tensor w = weight(48, 64, 0);
  EXPECT_TRUE(fp8_linear_supported(input(32, 64, 1), w, std::nullopt, at::kBFloat16));
  const Support odd_m = fp8_linear_support(input(30, 64, 1), w, std::nullopt, at::kBFloat16);
  EXPECT_FALSE(odd_m);
  EXPECT_NE(std::string(odd_m.reason).find("M is not a multiple of 16"), std::string::npos);
  {
    const at::NoGradGuard no_grad;  // no weight gradient: M is free
    EXPECT_TRUE(fp8_linear_supported(input(30, 64, 1), w, std::nullopt, at::kBFloat16));
  }
  EXPECT_FALSE(fp8_mm_supported(input(32, 64, 1), input(64, 40, 2), at::kBFloat16));
  EXPECT_TRUE(fp8_addmm_supported(at::zeros({48}), input(32, 64, 1), input(64, 48, 2), at::kHalf));
  EXPECT_FALSE(fp8_addmm_supported(at::zeros({3}), input(32, 64, 1), input(64, 48, 2), at::kHalf));
  const std::string message = error_of([&] { (void)fp8_linear(input(32, 60, 1), weight(48, 60, 0), std::nullopt, Recipe{}, at::kBFloat16); });
  EXPECT_NE(message.find("cannot run in fp8 (the inner dimension K is not a multiple of 16)"), std::string::npos) << message;
  EXPECT_NE(error_of([&] {
              (void)fp8_addmm(at::zeros({48}), input(32, 64, 1), input(64, 48, 2), c10::Scalar(1.0),
                              c10::Scalar(c10::complex<double>(1.0, 1.0)), Recipe{}, at::kBFloat16);
            }).find("alpha must be a real number"),
            std::string::npos);
}

TEST_F(Fp8Gemm, LinearAndGradientsMatchTheReference) {
  const at::Tensor w = weight(32, 64, 0);
  const at::Tensor x = input(16, 64, 1).requires_grad_(true);
  const at::Tensor y = fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16);
  ASSERT_EQ(y.scalar_type(), at::kBFloat16);
  const at::Tensor gy = input(16, 32, 2).to(at::kBFloat16);
  ::torch::autograd::backward({y}, {gy});
  const auto [qx, ix] = quantize(x, at::kFloat8_e4m3fn);
  const auto [qw, iw] = quantize(w, at::kFloat8_e4m3fn);
  const auto [qg, ig] = quantize(gy, at::kFloat8_e5m2);
  EXPECT_TRUE(at::equal(y, scaled_mm(qx, qw.t(), ix, iw, at::kBFloat16, true)));
  EXPECT_TRUE(at::equal(x.grad(), scaled_mm(qg, qw, ig, iw, at::kFloat)));
  EXPECT_TRUE(at::equal(w.grad(), scaled_mm(qg.t(), qx, ig, ix, at::kFloat)));
}

TEST_F(Fp8Gemm, CacheIsPerThreadAndClearedOnRequest) {
  const at::Tensor w = weight(32, 64, 0);
  const at::Tensor x = input(16, 64, 1);
  for (int i = 0; i < 10; ++i) (void)fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16);
  CacheStats s = weight_cache_stats(c10::DeviceType::CPU);
  EXPECT_EQ(s.quantizations, 1u);
  EXPECT_EQ(s.hits, 9u);
  EXPECT_EQ(s.entries, 1u);
  std::thread other([&] {
    (void)fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16);
    const CacheStats t = weight_cache_stats(c10::DeviceType::CPU);
    EXPECT_EQ(t.quantizations, 1u);
    EXPECT_EQ(t.hits, 0u);
  });
  other.join();
  clear_weight_cache(c10::DeviceType::CPU);
  s = weight_cache_stats(c10::DeviceType::CPU);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.quantizations, 1u);  // counters survive a clear
  // An inference-mode copy is kept apart from the autograd one.
  {
    const c10::InferenceMode inference;
    (void)fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16);
  }
  (void)fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16);
  EXPECT_EQ(weight_cache_stats(c10::DeviceType::CPU).quantizations, 3u);
  CallOptions no_cache;
  no_cache.cache_weights = false;
  (void)fp8_linear(x, w, std::nullopt, Recipe{}, at::kBFloat16, no_cache);
  EXPECT_EQ(weight_cache_stats(c10::DeviceType::CPU).quantizations, 4u);
  reset_weight_cache_stats(c10::DeviceType::CPU);
  EXPECT_EQ(weight_cache_stats(c10::DeviceType::CPU).quantizations, 0u);
}

TEST_F(Fp8Gemm, DelayedStateIsPerWeightAndInspectable) {
  const at::Tensor w = weight(32, 64, 0);
  const at::Tensor x = input(16, 64, 1);
  Recipe r;
  r.scaling = Scaling::Delayed;
  r.amax_history_len = 2;
  EXPECT_FALSE(delayed_scaling_state(w).has_value());
  const float amaxes[] = {1.0f, 2.0f, 0.5f};
  for (float a : amaxes) {
    {
      const at::NoGradGuard no_grad;
      w.fill_(a / 4);
      w[0][0].fill_(a);
    }
    (void)fp8_linear(x, w, std::nullopt, r, at::kFloat);
    clear_weight_cache(c10::DeviceType::CPU);
  }
  const auto snap = delayed_scaling_state(w);
  ASSERT_TRUE(snap.has_value());
  EXPECT_EQ(snap->amax_history, (std::vector<float>{0.5f, 2.0f}));
  EXPECT_EQ(snap->scale, 224.0f);  // 448 / max(0.5, 2)
  EXPECT_EQ(snap->casts, 3);
  EXPECT_FALSE(delayed_scaling_state(w, at::kFloat8_e5m2).has_value());
  EXPECT_EQ(delayed_scaling_state_size(), 1u);
  reset_delayed_scaling_state();
  EXPECT_EQ(delayed_scaling_state_size(), 0u);
}

}  // namespace
}  // namespace autocastgen::fp8
