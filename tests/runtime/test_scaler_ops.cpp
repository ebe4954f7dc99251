// autocastgen scaler ops against PyTorch's own CPU ops: bitwise results, found_inf, strides, errors.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "autocastgen/scaler/ops.h"
// The glue's private header, for its executor (not part of the installed API).
#include "../../runtime/torch/scaler/scaler_glue.h"

namespace {

using autocastgen::ops::non_finite_check_and_unscale_;

// Equal bits, or NaN in both places (NaN payloads differ even between PyTorch's own scalar and
// vector paths; see Note [conversions] in scaler_element.h).
::testing::AssertionResult same_bits_or_both_nan(const at::Tensor& expected, const at::Tensor& actual) {
  if (expected.scalar_type() != actual.scalar_type() || !expected.sizes().equals(actual.sizes())) {
    return ::testing::AssertionFailure() << "dtype or shape differs";
  }
  const at::Tensor e = expected.contiguous().reshape({-1});
  const at::Tensor a = actual.contiguous().reshape({-1});
  const at::ScalarType bits = e.element_size() == 2 ? at::kShort : e.element_size() == 4 ? at::kInt : at::kLong;
  const at::Tensor ok = at::logical_or(e.view(bits) == a.view(bits), at::logical_and(e.isnan(), a.isnan()));
  if (!ok.all().item<bool>()) {
    const int64_t i = at::logical_not(ok).nonzero()[0][0].item<int64_t>();
    return ::testing::AssertionFailure() << "element " << i << ": expected " << e[i].item<double>() << ", got "
                                         << a[i].item<double>();
  }
  return ::testing::AssertionSuccess();
}

// Gradient-like values: a spread of magnitudes, so products round, overflow (fp16) and underflow.
at::Tensor random_grad(at::IntArrayRef shape, at::ScalarType dtype, at::Generator& gen) {
  at::Tensor mant = at::rand(shape, gen, at::kDouble) * 2 - 1;
  at::Tensor exp = at::randint(-20, 16, shape, gen, at::TensorOptions().dtype(at::kDouble));
  return (mant * at::pow(2.0, exp)).to(dtype);
}

void put(at::Tensor& t, int64_t flat_index, double value) { t.view({-1})[flat_index].fill_(value); }

struct Pair {
  std::vector<at::Tensor> ours;
  std::vector<at::Tensor> theirs;
};

Pair clone_pair(const std::vector<at::Tensor>& grads) {
  Pair p;
  for (const at::Tensor& g : grads) {
    p.ours.push_back(g.clone());
    p.theirs.push_back(g.clone());
  }
  return p;
}

// Runs both ops on copies of `grads` and compares every gradient and found_inf.
void expect_same_as_pytorch(const std::vector<at::Tensor>& grads, float inv, const std::string& what) {
  Pair p = clone_pair(grads);
  at::Tensor found_ours = at::zeros({}, at::kFloat);
  at::Tensor found_theirs = at::zeros({}, at::kFloat);
  const at::Tensor inv_t = at::full({}, inv, at::kFloat);
  non_finite_check_and_unscale_(p.ours, found_ours, inv_t);
  at::_amp_foreach_non_finite_check_and_unscale_(p.theirs, found_theirs, inv_t);
  EXPECT_EQ(found_ours.item<float>(), found_theirs.item<float>()) << what;
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_TRUE(same_bits_or_both_nan(p.theirs[i], p.ours[i])) << what << ", gradient " << i;
  }
}

const std::vector<at::ScalarType> kDTypes{at::kFloat, at::kHalf, at::kBFloat16, at::kDouble};

TEST(ScalerOpsCpu, RandomListsMatchPyTorchBitwise) {
  at::Generator gen = at::detail::createCPUGenerator(123);
  std::mt19937 rng(5);
  for (at::ScalarType dtype : kDTypes) {
    for (int round = 0; round < 6; ++round) {
      std::vector<at::Tensor> grads;
      const int count = 1 + static_cast<int>(rng() % 40);
      for (int t = 0; t < count; ++t) grads.push_back(random_grad({static_cast<int64_t>(rng() % 5000)}, dtype, gen));
      for (float inv : {1.0f / 65536.0f, 1.0f / 3.0f, 1.0f, 4096.0f}) {
        expect_same_as_pytorch(grads, inv, std::string(c10::toString(dtype)) + " inv=" + std::to_string(inv));
      }
    }
  }
}

TEST(ScalerOpsCpu, SpecialValuesAtBoundariesFirstAndLastMatchPyTorch) {
  at::Generator gen = at::detail::createCPUGenerator(7);
  const double inf = std::numeric_limits<double>::infinity();
  for (at::ScalarType dtype : kDTypes) {
    for (double special : {inf, -inf, std::numeric_limits<double>::quiet_NaN()}) {
      // 32768 is the CPU kernel's grain; 8/16 its vector widths.
      for (int64_t n : {1, 15, 16, 17, 32767, 32768, 32769, 70001}) {
        const std::vector<at::Tensor> base{random_grad({n}, dtype, gen), random_grad({33}, dtype, gen)};
        for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
          std::vector<at::Tensor> grads{base[0].clone(), base[1]};
          put(grads[0], pos, special);
          expect_same_as_pytorch(grads, 0.5f, std::string(c10::toString(dtype)) + " n=" + std::to_string(n) +
                                                  " pos=" + std::to_string(pos) + " value=" + std::to_string(special));
        }
      }
    }
  }
}

TEST(ScalerOpsCpu, MixedDtypesInOneCall) {
  at::Generator gen = at::detail::createCPUGenerator(9);
  std::vector<at::Tensor> grads;
  for (int i = 0; i < 12; ++i) grads.push_back(random_grad({1000 + i}, kDTypes[static_cast<size_t>(i) % 4], gen));
  expect_same_as_pytorch(grads, 0.125f, "mixed");
  put(grads[7], 999, std::numeric_limits<double>::quiet_NaN());
  expect_same_as_pytorch(grads, 0.125f, "mixed with NaN");
}

TEST(ScalerOpsCpu, ZeroSizeListsAndTensors) {
  at::Tensor found = at::zeros({}, at::kFloat);
  const at::Tensor inv = at::full({}, 0.5f, at::kFloat);
  std::vector<at::Tensor> none;
  non_finite_check_and_unscale_(none, found, inv);
  EXPECT_EQ(found.item<float>(), 0.0f);
  std::vector<at::Tensor> empties{at::empty({0}, at::kFloat), at::empty({3, 0}, at::kHalf)};
  non_finite_check_and_unscale_(empties, found, inv);
  EXPECT_EQ(found.item<float>(), 0.0f);
  expect_same_as_pytorch({at::empty({0}), at::full({4}, std::numeric_limits<float>::infinity())}, 0.5f, "zero-size first");
}

TEST(ScalerOpsCpu, StridedGradientsAreUnscaledInPlace) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  for (at::ScalarType dtype : kDTypes) {
    at::Tensor base = random_grad({6, 10}, dtype, gen);
    at::Tensor expected = base.clone();
    std::vector<at::Tensor> views{
        base.slice(1, 0, 10, 3),                                   // gaps: staged through a copy
        random_grad({4, 5}, dtype, gen).t(),                       // dense, transposed
        random_grad({2, 3, 4, 5}, dtype, gen).contiguous(at::MemoryFormat::ChannelsLast)};
    std::vector<at::Tensor> theirs;
    for (const at::Tensor& v : views) theirs.push_back(v.clone());  // clone() keeps the strides
    at::Tensor found = at::zeros({}, at::kFloat);
    at::Tensor found_theirs = at::zeros({}, at::kFloat);
    const at::Tensor inv = at::full({}, 0.25f, at::kFloat);
    non_finite_check_and_unscale_(views, found, inv);
    at::_amp_foreach_non_finite_check_and_unscale_(theirs, found_theirs, inv);
    for (size_t i = 0; i < views.size(); ++i) EXPECT_TRUE(same_bits_or_both_nan(theirs[i], views[i])) << i;
    // The slice wrote through to its base; the columns it skips are untouched.
    expected.slice(1, 0, 10, 3).mul_(0.25);
    EXPECT_TRUE(same_bits_or_both_nan(expected, base)) << c10::toString(dtype);
    EXPECT_EQ(found.item<float>(), 0.0f);
  }
}

TEST(ScalerOpsCpu, SameTensorTwiceIsUnscaledTwiceLikePyTorch) {
  at::Tensor g = at::full({100000}, 8.0f);
  std::vector<at::Tensor> grads{g, g};
  at::Tensor found = at::zeros({}, at::kFloat);
  non_finite_check_and_unscale_(grads, found, at::full({}, 0.5f));
  EXPECT_TRUE(at::equal(g, at::full({100000}, 2.0f)));
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

TEST(ScalerOpsCpu, BadArgumentsGiveClearErrors) {
  at::Tensor found = at::zeros({}, at::kFloat);
  at::Tensor inv = at::full({}, 0.5f);
  std::vector<at::Tensor> ok{at::ones({3})};
  const std::string op = "autocastgen::non_finite_check_and_unscale_: ";
  expect_error([&] { at::Tensor f = at::zeros({2}); non_finite_check_and_unscale_(ok, f, inv); },
               op + "found_inf must be a 1-element tensor, got 2 elements");
  expect_error([&] { at::Tensor f = at::zeros({}, at::kDouble); non_finite_check_and_unscale_(ok, f, inv); },
               op + "found_inf must be a Float tensor, got Double");
  expect_error([&] { non_finite_check_and_unscale_(ok, found, at::full({}, 2, at::kHalf)); },
               op + "inv_scale must be a Float tensor, got Half");
  expect_error([&] {
    std::vector<at::Tensor> g{at::ones({3}), at::ones({3}, at::kInt)};
    non_finite_check_and_unscale_(g, found, inv);
  }, op + "gradient 1 has dtype Int; supported dtypes are Float, Half, BFloat16 and Double");
  expect_error([&] {
    std::vector<at::Tensor> g{at::ones({3}).expand({4, 3})};
    non_finite_check_and_unscale_(g, found, inv);
  }, op + "gradient 0 has elements that share memory");
  expect_error([&] {
    std::vector<at::Tensor> g{at::Tensor()};
    non_finite_check_and_unscale_(g, found, inv);
  }, op + "gradient 0 is an undefined tensor");
}

// Note [CPU threads in the glue] in runtime/torch/scaler/scaler_ops.cpp: the op's workers follow
// PyTorch's intra-op thread count and really run on more than one thread (the glue once used an
// at::parallel_for that ran serially).
TEST(ScalerOpsCpu, WorkersFollowTorchsThreadCountAndRunOnSeveralThreads) {
  const int saved = at::get_num_threads();
  const autocastgen::kernels::Executor& ex = autocastgen::torch_glue::cpu_executor();
  at::set_num_threads(1);
  EXPECT_EQ(ex.workers_for(int64_t{1} << 26), 1);
  at::set_num_threads(2);
  const int64_t wanted = ex.workers_for(int64_t{1} << 26);
  EXPECT_EQ(ex.workers_for(10), 1);
  if (std::thread::hardware_concurrency() >= 2) {
    EXPECT_EQ(wanted, 2);
    // Each body waits a little so a helper can claim the other slot; on a busy machine a helper
    // may come late (the caller then runs both), so several calls are allowed.
    bool seen_two_threads = false;
    for (int call = 0; call < 50 && !seen_two_threads; ++call) {
      std::mutex m;
      std::set<std::thread::id> threads;
      ex.run(2, [&](int64_t) {
        {
          const std::lock_guard<std::mutex> lock(m);
          threads.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      });
      seen_two_threads = threads.size() == 2;
    }
    EXPECT_TRUE(seen_two_threads);
  }
  at::set_num_threads(saved);
}

// --- update_scale_ --------------------------------------------------------------------------------

struct ScaleState {
  at::Tensor scale;
  at::Tensor tracker;
};

ScaleState make_state(float scale, int tracker) {
  return {at::full({}, scale, at::kFloat), at::full({}, tracker, at::kInt)};
}

TEST(ScalerOpsCpu, UpdateScaleFollowsPyTorchOverThousandsOfSteps) {
  std::mt19937 rng(77);
  struct Params {
    double growth, backoff;
    int64_t interval;
    double p_inf;
  };
  for (const Params& prm : {Params{2.0, 0.5, 7, 0.1}, Params{1.1, 0.7, 3, 0.25}, Params{3.0, 0.3, 1, 0.05},
                            Params{2.0, 0.5, 2000, 0.0}, Params{1.0001, 0.999, 5, 0.5}}) {
    ScaleState ours = make_state(65536.0f, 0);
    ScaleState theirs = make_state(65536.0f, 0);
    std::bernoulli_distribution inf(prm.p_inf);
    for (int i = 0; i < 5000; ++i) {
      const at::Tensor found = at::full({}, inf(rng) ? 1.0f : 0.0f);
      autocastgen::ops::update_scale_(ours.scale, ours.tracker, found, prm.growth, prm.backoff, prm.interval);
      at::_amp_update_scale_(theirs.scale, theirs.tracker, found, prm.growth, prm.backoff, prm.interval);
      ASSERT_EQ(ours.scale.item<float>(), theirs.scale.item<float>()) << "step " << i;
      ASSERT_EQ(ours.tracker.item<int>(), theirs.tracker.item<int>()) << "step " << i;
    }
  }
}

TEST(ScalerOpsCpu, UpdateScaleEdgeCasesMatchPyTorch) {
  const float big = std::numeric_limits<float>::max() / 1.5f;
  for (float found : {0.0f, 1.0f, 5.0f, std::numeric_limits<float>::quiet_NaN()}) {
    for (float start : {1.0f, big, 0.0f, std::numeric_limits<float>::denorm_min()}) {
      for (int tracker : {0, 2}) {
        ScaleState ours = make_state(start, tracker);
        ScaleState theirs = make_state(start, tracker);
        const at::Tensor f = at::full({}, found);
        autocastgen::ops::update_scale_(ours.scale, ours.tracker, f, 2.0, 0.5, 3);
        at::_amp_update_scale_(theirs.scale, theirs.tracker, f, 2.0, 0.5, 3);
        EXPECT_EQ(ours.scale.item<float>(), theirs.scale.item<float>()) << start << " " << found;
        EXPECT_EQ(ours.tracker.item<int>(), theirs.tracker.item<int>());
      }
    }
  }
}

TEST(ScalerOpsCpu, UpdateScaleReturnsSelfAndChecksArguments) {
  ScaleState s = make_state(4.0f, 0);
  at::Tensor& r = autocastgen::ops::update_scale_(s.scale, s.tracker, at::zeros({}), 2.0, 0.5, 10);
  EXPECT_TRUE(r.is_same(s.scale));
  const std::string op = "autocastgen::update_scale_: ";
  expect_error([&] {
    at::Tensor t = at::zeros({}, at::kLong);
    autocastgen::ops::update_scale_(s.scale, t, at::zeros({}), 2.0, 0.5, 10);
  }, op + "growth_tracker must be a Int tensor, got Long");
  expect_error([&] {
    at::Tensor sc = at::ones({2});
    autocastgen::ops::update_scale_(sc, s.tracker, at::zeros({}), 2.0, 0.5, 10);
  }, op + "self (the scale) must be a 1-element tensor, got 2 elements");
  expect_error([&] { autocastgen::ops::update_scale_(s.scale, s.tracker, at::zeros({}, at::kHalf), 2.0, 0.5, 10); },
               op + "found_inf must be a Float tensor, got Half");
}

TEST(ScalerOpsCpu, UpdateScaleHysteresisToleratesThenBacksOff) {
  ScaleState s = make_state(1024.0f, 0);
  at::Tensor left = at::full({}, 2, at::kInt);
  const at::Tensor inf = at::ones({});
  autocastgen::ops::update_scale_hysteresis_(s.scale, s.tracker, left, inf, 2.0, 0.5, 3, 2);
  EXPECT_EQ(s.scale.item<float>(), 1024.0f);
  EXPECT_EQ(left.item<int>(), 1);
  autocastgen::ops::update_scale_hysteresis_(s.scale, s.tracker, left, inf, 2.0, 0.5, 3, 2, 600.0);
  EXPECT_EQ(s.scale.item<float>(), 600.0f);  // 512 clamped to min_scale
  for (int i = 0; i < 3; ++i) {
    autocastgen::ops::update_scale_hysteresis_(s.scale, s.tracker, left, at::zeros({}), 2.0, 0.5, 3, 2, 600.0, 1000.0);
  }
  EXPECT_EQ(s.scale.item<float>(), 1000.0f);  // 1200 clamped to max_scale
  EXPECT_EQ(left.item<int>(), 2);
  expect_error([&] { autocastgen::ops::update_scale_hysteresis_(s.scale, s.tracker, left, inf, 2.0, 0.5, 3, 0); },
               "hysteresis must be an integer >= 1 (1 turns it off), got 0");
  expect_error([&] { autocastgen::ops::update_scale_hysteresis_(s.scale, s.tracker, left, inf, 2.0, 0.5, 3, 1, 5.0, 1.0); },
               "need 0 <= min_scale <= max_scale, got min_scale=5 max_scale=1");
}

}  // namespace
