// autocastgen::GradScaler: torch.amp.GradScaler semantics, checked step by step against PyTorch's ops.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>

#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "autocastgen/scaler/grad_scaler.h"

namespace {

using autocastgen::GradScaler;
using autocastgen::GradScalerOptions;

GradScalerOptions cpu() { return GradScalerOptions().device(c10::DeviceType::CPU); }

// A few fp32 parameters with an SGD optimizer (no momentum: p -= lr * grad, easy to predict).
struct Toy {
  explicit Toy(std::vector<int64_t> sizes, double lr = 0.1) : opt(make_params(sizes), torch::optim::SGDOptions(lr)) {}
  static std::vector<at::Tensor> make_params(const std::vector<int64_t>& sizes) {
    std::vector<at::Tensor> ps;
    for (int64_t n : sizes) ps.push_back(at::randn({n}).set_requires_grad(true));
    return ps;
  }
  std::vector<at::Tensor>& params() { return opt.param_groups()[0].params(); }
  void set_grads(const std::vector<at::Tensor>& grads) {
    for (size_t i = 0; i < grads.size(); ++i) params()[i].mutable_grad() = grads[i].clone();
  }
  std::vector<at::Tensor> snapshot() {
    std::vector<at::Tensor> s;
    for (auto& p : params()) s.push_back(p.detach().clone());
    return s;
  }
  torch::optim::SGD opt;
};

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << needle;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The reference is PyTorch itself: a shadow scale/tracker driven by at::_amp_update_scale_ and
// found_inf from at::_amp_foreach_non_finite_check_and_unscale_ on a copy of the gradients.
TEST(GradScaler, ScaleTrajectoryMatchesPyTorchOpsOverThousandsOfStepsWithInjectedInfs) {
  at::manual_seed(0);
  std::mt19937 rng(3);
  std::bernoulli_distribution inject(0.04);
  std::uniform_int_distribution<int> which(0, 2);
  Toy toy({7, 300, 33});
  GradScaler scaler(cpu().init_scale(1024.0).growth_interval(10).growth_factor(2.0).backoff_factor(0.5));
  at::Tensor shadow_scale = at::full({}, 1024.0f);
  at::Tensor shadow_tracker = at::zeros({}, at::kInt);
  int skipped = 0;
  int grown = 0;
  for (int step = 0; step < 3000; ++step) {
    const float scale_now = shadow_scale.item<float>();
    (void)scaler.scale(at::ones({}));  // initializes the scale on the first call
    std::vector<at::Tensor> grads;
    for (auto& p : toy.params()) grads.push_back(at::randn(p.sizes()) * scale_now);
    if (inject(rng)) {
      const double bad[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                            std::numeric_limits<double>::quiet_NaN()};
      at::Tensor& g = grads[static_cast<size_t>(which(rng))];
      g.view({-1})[static_cast<int64_t>(rng() % static_cast<unsigned>(g.numel()))].fill_(bad[rng() % 3]);
    }
    toy.set_grads(grads);

    std::vector<at::Tensor> shadow_grads;
    for (const auto& g : grads) shadow_grads.push_back(g.clone());
    at::Tensor found = at::zeros({});
    const at::Tensor inv = shadow_scale.to(at::kDouble).reciprocal().to(at::kFloat);
    at::_amp_foreach_non_finite_check_and_unscale_(shadow_grads, found, inv);
    const bool expect_skip = found.item<float>() != 0.0f;

    const auto before = toy.snapshot();
    const std::optional<at::Tensor> ret = scaler.step(toy.opt);
    const auto after = toy.snapshot();
    if (expect_skip) {
      ++skipped;
      ASSERT_FALSE(ret.has_value()) << "step " << step;
      ASSERT_TRUE(all_equal(before, after)) << "parameters changed on a skipped step " << step;
    } else {
      ASSERT_TRUE(ret.has_value()) << "step " << step;
      for (size_t i = 0; i < after.size(); ++i) {
        ASSERT_TRUE(at::equal(after[i], before[i].add(shadow_grads[i], -0.1))) << "step " << step << " param " << i;
      }
    }
    scaler.update();
    const float old = shadow_scale.item<float>();
    at::_amp_update_scale_(shadow_scale, shadow_tracker, found, 2.0, 0.5, 10);
    grown += shadow_scale.item<float>() > old ? 1 : 0;
    ASSERT_EQ(scaler.get_scale(), shadow_scale.item<float>()) << "step " << step;
    ASSERT_EQ(scaler.get_growth_tracker(), shadow_tracker.item<int>()) << "step " << step;
  }
  // The run exercised both directions many times.
  EXPECT_GT(skipped, 50);
  EXPECT_GT(grown, 50);
}

TEST(GradScaler, ScaleMultipliesAndInitializesLazilyOnTheOutputsDevice) {
  GradScaler scaler(cpu().init_scale(8.0));
  EXPECT_FALSE(scaler.get_scale_async().defined());
  EXPECT_EQ(scaler.get_scale(), 8.0);
  const at::Tensor loss = at::full({}, 1.5f);
  EXPECT_EQ(scaler.scale(loss).item<float>(), 12.0f);
  ASSERT_TRUE(scaler.get_scale_async().defined());
  EXPECT_EQ(scaler.get_scale_async().scalar_type(), at::kFloat);
  const std::vector<at::Tensor> outs{at::ones({2}), at::full({3}, 2.0, at::kDouble), at::ones({1}, at::kBFloat16)};
  const auto scaled = scaler.scale(outs);
  ASSERT_EQ(scaled.size(), 3u);
  EXPECT_TRUE(at::equal(scaled[0], at::full({2}, 8.0f)));
  EXPECT_TRUE(at::equal(scaled[1], at::full({3}, 16.0, at::kDouble)));
  EXPECT_EQ(scaled[2].scalar_type(), at::kBFloat16);  // a 0-dim float scale does not promote, as in Python
}

TEST(GradScaler, BackwardThroughTheScaledLossGivesScaledGradients) {
  GradScaler scaler(cpu().init_scale(4.0));
  Toy toy({3});
  const at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f});
  const at::Tensor loss = (toy.params()[0] * x).sum();
  scaler.scale(loss).backward();
  EXPECT_TRUE(at::equal(toy.params()[0].grad(), x * 4.0f));
  scaler.unscale_(toy.opt);
  EXPECT_TRUE(at::equal(toy.params()[0].grad(), x));
}

TEST(GradScaler, UnscaleThenStepUnscalesOnce) {
  GradScaler scaler(cpu().init_scale(256.0));
  Toy toy({5});
  (void)scaler.scale(at::ones({}));
  toy.set_grads({at::full({5}, 512.0f)});
  scaler.unscale_(toy.opt);
  EXPECT_TRUE(at::equal(toy.params()[0].grad(), at::full({5}, 2.0f)));
  toy.params()[0].mutable_grad().clamp_(-1.0, 1.0);  // e.g. gradient clipping between the two
  const auto before = toy.snapshot();
  ASSERT_TRUE(scaler.step(toy.opt).has_value());
  EXPECT_TRUE(at::equal(toy.params()[0].detach(), before[0] - 0.1f));
}

TEST(GradScaler, MisuseGivesTheSameErrorsAsTorchAmp) {
  GradScaler scaler(cpu());
  Toy toy({2});
  expect_error([&] { scaler.unscale_(toy.opt); }, "GradScaler::unscale_: the scale is not initialized");
  expect_error([&] { scaler.step(toy.opt); }, "GradScaler::step: the scale is not initialized");
  expect_error([&] { scaler.update(); }, "GradScaler::update: the scale is not initialized");
  (void)scaler.scale(at::ones({}));
  expect_error([&] { scaler.step(toy.opt); }, "no inf checks were recorded for this optimizer");
  scaler = GradScaler(cpu());
  (void)scaler.scale(at::ones({}));
  expect_error([&] { scaler.update(); }, "GradScaler::update: no inf checks were recorded in this iteration");
  toy.set_grads({at::ones({2})});
  scaler.unscale_(toy.opt);
  expect_error([&] { scaler.unscale_(toy.opt); },
               "unscale_() was already called for this optimizer since the last update()");
  scaler.step(toy.opt);
  expect_error([&] { scaler.unscale_(toy.opt); }, "called after step() for this optimizer");
  expect_error([&] { scaler.step(toy.opt); }, "step() was already called for this optimizer since the last update()");
  scaler.update();
  toy.set_grads({at::ones({2})});
  scaler.unscale_(toy.opt);  // fine again after update()
}

TEST(GradScaler, Float16GradientsAreRefusedWithAValueError) {
  GradScaler scaler(cpu());
  at::Tensor p = at::ones({3}, at::kHalf).set_requires_grad(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  p.mutable_grad() = at::ones({3}, at::kHalf);
  (void)scaler.scale(at::ones({}));
  EXPECT_THROW(scaler.unscale_(opt), c10::ValueError);
}

TEST(GradScaler, BFloat16AndDoubleGradientsAreUnscaled) {
  GradScaler scaler(cpu().init_scale(4.0));
  at::Tensor a = at::ones({3}, at::kBFloat16).set_requires_grad(true);
  at::Tensor b = at::ones({3}, at::kDouble).set_requires_grad(true);
  torch::optim::SGD opt({a, b}, torch::optim::SGDOptions(0.1));
  a.mutable_grad() = at::full({3}, 8.0, at::kBFloat16);
  b.mutable_grad() = at::full({3}, 8.0, at::kDouble);
  (void)scaler.scale(at::ones({}));
  scaler.unscale_(opt);
  EXPECT_TRUE(at::equal(a.grad(), at::full({3}, 2.0, at::kBFloat16)));
  EXPECT_TRUE(at::equal(b.grad(), at::full({3}, 2.0, at::kDouble)));
}

TEST(GradScaler, SparseGradientValuesAreUnscaled) {
  GradScaler scaler(cpu().init_scale(2.0));
  at::Tensor p = at::zeros({4}).set_requires_grad(true);
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  p.mutable_grad() = at::sparse_coo_tensor(at::tensor({int64_t{1}, int64_t{3}}).view({1, 2}), at::tensor({4.0f, 6.0f}), {4});
  (void)scaler.scale(at::ones({}));
  scaler.unscale_(opt);
  EXPECT_TRUE(at::equal(p.grad().to_dense(), at::tensor({0.0f, 2.0f, 0.0f, 3.0f})));
  EXPECT_EQ(scaler.found_inf_per_device(opt).at(0).item<float>(), 0.0f);
}

TEST(GradScaler, EachOptimizerSkipsOnItsOwnInfButTheScaleBacksOffOnce) {
  GradScaler scaler(cpu().init_scale(64.0));
  Toy clean({3});
  Toy dirty({3});
  (void)scaler.scale(at::ones({}));
  clean.set_grads({at::ones({3})});
  dirty.set_grads({at::tensor({1.0f, std::numeric_limits<float>::infinity(), 1.0f})});
  const auto clean_before = clean.snapshot();
  const auto dirty_before = dirty.snapshot();
  EXPECT_TRUE(scaler.step(clean.opt).has_value());
  EXPECT_FALSE(scaler.step(dirty.opt).has_value());
  EXPECT_FALSE(all_equal(clean_before, clean.snapshot()));
  EXPECT_TRUE(all_equal(dirty_before, dirty.snapshot()));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_TRUE(scaler.found_inf_per_device(clean.opt).empty());  // cleared by update()
}

TEST(GradScaler, UpdateWithAnExplicitScale) {
  GradScaler scaler(cpu());
  Toy toy({2});
  (void)scaler.scale(at::ones({}));
  toy.set_grads({at::ones({2})});
  scaler.step(toy.opt);
  scaler.update(100.0);
  EXPECT_EQ(scaler.get_scale(), 100.0);
  scaler.update(at::full({1}, 7.0f));
  EXPECT_EQ(scaler.get_scale(), 7.0);
  expect_error([&] { scaler.update(at::ones({2})); }, "new_scale must be a float or a 1-element cpu tensor");
  expect_error([&] { scaler.update(at::ones({1}).set_requires_grad(true)); }, "with requires_grad=False");
}

TEST(GradScaler, FactorsAndIntervalHaveGettersAndSettersAndAreValidated) {
  GradScaler scaler(cpu().growth_factor(3.0).backoff_factor(0.25).growth_interval(2));
  EXPECT_EQ(scaler.get_growth_factor(), 3.0);
  EXPECT_EQ(scaler.get_backoff_factor(), 0.25);
  EXPECT_EQ(scaler.get_growth_interval(), 2);
  scaler.set_growth_factor(4.0);
  scaler.set_backoff_factor(0.125);
  scaler.set_growth_interval(1);
  Toy toy({2});
  (void)scaler.scale(at::ones({}));
  toy.set_grads({at::ones({2})});
  scaler.step(toy.opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0 * 4.0);  // the new factor and interval are used
  toy.set_grads({at::full({2}, std::numeric_limits<float>::quiet_NaN())});
  scaler.step(toy.opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0 * 4.0 * 0.125);
  expect_error([] { GradScaler s(cpu().growth_factor(1.0)); }, "growth_factor must be > 1.0, got 1");
  expect_error([] { GradScaler s(cpu().backoff_factor(1.0)); }, "backoff_factor must be < 1.0, got 1");
  expect_error([] { GradScaler s(cpu().hysteresis(0)); }, "hysteresis must be an integer >= 1");
}

TEST(GradScaler, DisabledIsANoOp) {
  GradScaler scaler(cpu().enabled(false));
  EXPECT_FALSE(scaler.is_enabled());
  Toy toy({2});
  const at::Tensor loss = at::full({}, 3.0f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  toy.set_grads({at::full({2}, std::numeric_limits<float>::infinity())});
  scaler.unscale_(toy.opt);
  EXPECT_TRUE(at::equal(toy.params()[0].grad(), at::full({2}, std::numeric_limits<float>::infinity())));
  toy.set_grads({at::ones({2})});
  const auto before = toy.snapshot();
  EXPECT_TRUE(scaler.step(toy.opt).has_value());
  EXPECT_FALSE(all_equal(before, toy.snapshot()));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  EXPECT_EQ(scaler.state_dict().size(), 0u);
  scaler.load_state_dict(autocastgen::GradScalerState(c10::StringType::get(), c10::AnyType::get()));  // no-op, no error
}

TEST(GradScaler, CudaScalerWithoutCudaDisablesItself) {
  GradScaler scaler;  // device() defaults to CUDA, as torch.amp.GradScaler's does
  EXPECT_EQ(scaler.is_enabled(), torch::cuda::is_available());
}

void run_steps(GradScaler& scaler, Toy& toy, const std::vector<bool>& infs) {
  for (bool inf : infs) {
    (void)scaler.scale(at::ones({}));
    toy.set_grads({inf ? at::full({2}, std::numeric_limits<float>::infinity()) : at::ones({2})});
    scaler.step(toy.opt);
    scaler.update();
  }
}

TEST(GradScalerState, StateDictHasTorchAmpKeysAndRoundTrips) {
  GradScaler a(cpu().init_scale(512.0).growth_factor(3.0).backoff_factor(0.25).growth_interval(4));
  Toy toy({2});
  run_steps(a, toy, {false, false, true, false, false});
  const autocastgen::GradScalerState sd = a.state_dict();
  std::set<std::string> keys;
  for (const auto& entry : sd) keys.insert(entry.key().toStringRef());
  EXPECT_EQ(keys, (std::set<std::string>{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}));
  EXPECT_EQ(sd.at("scale").toDouble(), 128.0);
  EXPECT_EQ(sd.at("growth_factor").toDouble(), 3.0);
  EXPECT_EQ(sd.at("backoff_factor").toDouble(), 0.25);
  EXPECT_EQ(sd.at("growth_interval").toInt(), 4);
  EXPECT_EQ(sd.at("_growth_tracker").toInt(), 2);

  // Through pickle bytes (the format torch.save / torch.load share) into a fresh scaler, loaded
  // before its first scale() and into one that already has a scale.
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(sd));
  const autocastgen::GradScalerState back = torch::jit::pickle_load(bytes).toGenericDict();
  GradScaler fresh(cpu());
  fresh.load_state_dict(back);
  GradScaler used(cpu());
  run_steps(used, toy, {true});
  used.load_state_dict(back);
  for (GradScaler* s : {&fresh, &used}) {
    EXPECT_EQ(s->get_scale(), 128.0);
    EXPECT_EQ(s->get_growth_tracker(), 2);
    EXPECT_EQ(s->get_growth_factor(), 3.0);
  }
  // All three continue identically.
  const std::vector<bool> more{false, false, true, false, false, false, false, false};
  run_steps(a, toy, more);
  run_steps(fresh, toy, more);
  run_steps(used, toy, more);
  EXPECT_EQ(fresh.get_scale(), a.get_scale());
  EXPECT_EQ(used.get_scale(), a.get_scale());
  EXPECT_EQ(used.get_growth_tracker(), a.get_growth_tracker());
}

TEST(GradScalerState, ExtrasAddTheirKeysAndRoundTrip) {
  GradScaler a(cpu().hysteresis(3).min_scale(1.0).max_scale(1e6));
  Toy toy({2});
  run_steps(a, toy, {true});
  const auto sd = a.state_dict();
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_EQ(sd.at("hysteresis").toInt(), 3);
  EXPECT_EQ(sd.at("_hysteresis_tracker").toInt(), 2);
  EXPECT_EQ(sd.at("max_scale").toDouble(), 1e6);
  GradScaler b(cpu());
  b.load_state_dict(sd);
  EXPECT_EQ(b.options().hysteresis(), 3);
  EXPECT_EQ(b.get_hysteresis_left(), 2);
  EXPECT_EQ(b.options().min_scale(), 1.0);
}

TEST(GradScalerState, BadStateDictsAreRejectedAndLeaveTheScalerUnchanged) {
  GradScaler s(cpu().init_scale(32.0));
  autocastgen::GradScalerState empty(c10::StringType::get(), c10::AnyType::get());
  expect_error([&] { s.load_state_dict(empty); }, "the state dict is empty (was it saved from a disabled GradScaler?)");
  auto sd = GradScaler(cpu()).state_dict();
  ASSERT_EQ(sd.erase("growth_interval"), 1u);
  expect_error([&] { s.load_state_dict(sd); }, "the state dict has no key 'growth_interval'");
  sd.insert("growth_interval", 2.5);
  expect_error([&] { s.load_state_dict(sd); }, "'growth_interval' must be an int, got Double");
  EXPECT_EQ(s.get_scale(), 32.0);
}

TEST(GradScalerExtras, HysteresisSkipsStepsButDelaysTheBackoff) {
  GradScaler scaler(cpu().init_scale(1024.0).hysteresis(2).growth_interval(3));
  Toy toy({2});
  (void)scaler.scale(at::ones({}));
  toy.set_grads({at::full({2}, std::numeric_limits<float>::quiet_NaN())});
  EXPECT_FALSE(scaler.step(toy.opt).has_value());  // the step is skipped even when tolerated
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.get_hysteresis_left(), 1);
  run_steps(scaler, toy, {true});
  EXPECT_EQ(scaler.get_scale(), 512.0);
  run_steps(scaler, toy, {false, false, false});
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.get_hysteresis_left(), 2);
}

TEST(GradScalerExtras, MinAndMaxScaleClamp) {
  GradScaler scaler(cpu().init_scale(8.0).min_scale(2.0).max_scale(16.0).growth_interval(1));
  Toy toy({2});
  run_steps(scaler, toy, {true, true, true});
  EXPECT_EQ(scaler.get_scale(), 2.0);
  run_steps(scaler, toy, {false, false, false, false});
  EXPECT_EQ(scaler.get_scale(), 16.0);
}

}  // namespace
