// The scale update rule: PyTorch's growth/backoff, the hysteresis variant, clamps, edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "autocastgen/kernels/scaler_cpu.h"

namespace autocastgen::kernels {
namespace {

struct State {
  float scale;
  std::int32_t tracker = 0;
  std::int32_t hysteresis_left = 1;
};

void step(State& s, bool inf, const ScaleUpdateConfig& cfg, bool with_hysteresis = false) {
  update_scale_cpu(&s.scale, &s.tracker, with_hysteresis ? &s.hysteresis_left : nullptr, inf ? 1.0f : 0.0f, cfg);
}

TEST(UpdateScale, GrowsAfterIntervalCleanStepsAndBacksOffOnInf) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 3;
  State s{1024.0f};
  step(s, false, cfg);
  step(s, false, cfg);
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.tracker, 2);
  step(s, false, cfg);
  EXPECT_EQ(s.scale, 2048.0f);
  EXPECT_EQ(s.tracker, 0);
  step(s, false, cfg);
  step(s, true, cfg);
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.tracker, 0);
  step(s, true, cfg);
  EXPECT_EQ(s.scale, 512.0f);
}

// The defaults are PyTorch's (torch.amp.GradScaler): growth x2 after 2000 clean steps, backoff x0.5,
// and the extras off (hysteresis 1, no clamps).
TEST(UpdateScale, DefaultsArePyTorchs) {
  const ScaleUpdateConfig cfg;
  EXPECT_EQ(cfg.growth_factor, 2.0);
  EXPECT_EQ(cfg.backoff_factor, 0.5);
  EXPECT_EQ(cfg.growth_interval, 2000);
  EXPECT_EQ(cfg.hysteresis, 1);
  EXPECT_EQ(cfg.min_scale, 0.0f);
  EXPECT_EQ(cfg.max_scale, std::numeric_limits<float>::infinity());
  State s{65536.0f, 0, cfg.hysteresis};
  for (int i = 0; i < 1999; ++i) step(s, false, cfg, true);
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_EQ(s.tracker, 1999);
  step(s, false, cfg, true);
  EXPECT_EQ(s.scale, 131072.0f);
  EXPECT_EQ(s.tracker, 0);
  step(s, true, cfg, true);  // hysteresis 1: the first overflow backs off
  EXPECT_EQ(s.scale, 65536.0f);
}

TEST(UpdateScale, AnyNonZeroFoundInfCountsIncludingNaN) {
  ScaleUpdateConfig cfg;
  for (float f : {1.0f, 2.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), 1e-30f}) {
    float scale = 8.0f;
    std::int32_t tracker = 5;
    update_scale_cpu(&scale, &tracker, nullptr, f, cfg);
    EXPECT_EQ(scale, 4.0f) << f;
    EXPECT_EQ(tracker, 0) << f;
  }
}

TEST(UpdateScale, NeverGrowsToANonFiniteScale) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 1;
  State s{std::numeric_limits<float>::max() / 1.5f};
  step(s, false, cfg);
  EXPECT_EQ(s.scale, std::numeric_limits<float>::max() / 1.5f);
  EXPECT_EQ(s.tracker, 0);  // the tracker is reset even though the scale did not grow
}

TEST(UpdateScale, FactorsAreAppliedInDoubleThenRoundedToFloat) {
  // 0.7 is not a float: float(s * 0.7) differs from s * 0.7f for this s. PyTorch's kernels
  // multiply in double, so must we.
  ScaleUpdateConfig cfg;
  cfg.backoff_factor = 0.7;
  float s0 = 0;
  for (float cand = 1.0f; cand < 2.0f; cand = std::nextafter(cand, 2.0f)) {
    if (static_cast<float>(static_cast<double>(cand) * 0.7) != cand * 0.7f) {
      s0 = cand;
      break;
    }
  }
  ASSERT_NE(s0, 0.0f);
  State s{s0};
  step(s, true, cfg);
  EXPECT_EQ(s.scale, static_cast<float>(static_cast<double>(s0) * 0.7));
  EXPECT_NE(s.scale, s0 * 0.7f);
}

TEST(UpdateScale, GrowthFactorIsAppliedInDoubleThenRoundedToFloat) {
  // The same for growth: 1.1 is not a float either.
  ScaleUpdateConfig cfg;
  cfg.growth_factor = 1.1;
  cfg.growth_interval = 1;
  float s0 = 0;
  for (float cand = 1.0f; cand < 2.0f; cand = std::nextafter(cand, 2.0f)) {
    if (static_cast<float>(static_cast<double>(cand) * 1.1) != cand * 1.1f) {
      s0 = cand;
      break;
    }
  }
  ASSERT_NE(s0, 0.0f);
  State s{s0};
  step(s, false, cfg);
  EXPECT_EQ(s.scale, static_cast<float>(static_cast<double>(s0) * 1.1));
  EXPECT_NE(s.scale, s0 * 1.1f);
}

TEST(UpdateScale, GrowthIntervalTheTrackerCannotReachNeverGrows) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 0;
  State s{2.0f, std::numeric_limits<std::int32_t>::max() - 1};
  step(s, false, cfg);
  step(s, false, cfg);  // wraps instead of overflowing (UBSan would catch an overflow)
  EXPECT_EQ(s.scale, 2.0f);
  EXPECT_EQ(s.tracker, std::numeric_limits<std::int32_t>::min());
}

TEST(UpdateScaleHysteresis, ToleratesNMinusOneOverflowsThenBacksOff) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 4;
  cfg.hysteresis = 3;
  State s{1024.0f, 2, 3};
  step(s, true, cfg, true);
  EXPECT_EQ(s.scale, 1024.0f);
  EXPECT_EQ(s.hysteresis_left, 2);
  EXPECT_EQ(s.tracker, 0);  // a tolerated overflow still restarts the growth interval
  step(s, false, cfg, true);
  EXPECT_EQ(s.hysteresis_left, 2);  // no refill on a clean step (Megatron's rule)
  step(s, true, cfg, true);
  EXPECT_EQ(s.scale, 1024.0f);
  step(s, true, cfg, true);
  EXPECT_EQ(s.scale, 512.0f);  // the third overflow backs off
  EXPECT_EQ(s.hysteresis_left, 0);
  step(s, true, cfg, true);
  EXPECT_EQ(s.scale, 256.0f);  // and every further one, until a refill
  EXPECT_EQ(s.hysteresis_left, 0);  // the budget stays at 0, never below
  for (int i = 0; i < 4; ++i) step(s, false, cfg, true);
  EXPECT_EQ(s.scale, 512.0f);
  EXPECT_EQ(s.hysteresis_left, 3);  // refilled when the growth interval completed
  step(s, true, cfg, true);
  EXPECT_EQ(s.scale, 512.0f);
}

TEST(UpdateScaleHysteresis, HysteresisOneIsExactlyPyTorchsRule) {
  std::mt19937 rng(17);
  std::bernoulli_distribution inf(0.3);
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 3;
  cfg.hysteresis = 1;
  State with{65536.0f, 0, 1};
  State without{65536.0f, 0, 1};
  for (int i = 0; i < 5000; ++i) {
    const bool f = inf(rng);
    step(with, f, cfg, true);
    step(without, f, cfg, false);
    ASSERT_EQ(with.scale, without.scale) << i;
    ASSERT_EQ(with.tracker, without.tracker) << i;
  }
}

TEST(UpdateScaleClamps, BackoffStopsAtMinAndGrowthAtMax) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 1;
  cfg.min_scale = 100.0f;
  cfg.max_scale = 1000.0f;
  State s{300.0f};
  step(s, true, cfg);
  EXPECT_EQ(s.scale, 150.0f);
  step(s, true, cfg);
  EXPECT_EQ(s.scale, 100.0f);
  step(s, true, cfg);
  EXPECT_EQ(s.scale, 100.0f);
  for (int i = 0; i < 3; ++i) step(s, false, cfg);
  EXPECT_EQ(s.scale, 800.0f);
  step(s, false, cfg);
  EXPECT_EQ(s.scale, 1000.0f);
  step(s, false, cfg);
  EXPECT_EQ(s.scale, 1000.0f);
}

TEST(UpdateScaleClamps, FiniteMaxLetsAnOverflowingGrowthReachTheCap) {
  ScaleUpdateConfig cfg;
  cfg.growth_interval = 1;
  cfg.max_scale = std::numeric_limits<float>::max();
  State s{std::numeric_limits<float>::max() / 1.5f};
  step(s, false, cfg);
  EXPECT_EQ(s.scale, std::numeric_limits<float>::max());
}

TEST(UpdateScaleClamps, NaNScaleStaysNaN) {
  ScaleUpdateConfig cfg;
  cfg.min_scale = 1.0f;
  State s{std::numeric_limits<float>::quiet_NaN()};
  step(s, true, cfg);
  EXPECT_TRUE(std::isnan(s.scale));
}

TEST(UpdateScaleErrors, NullPointersAreRejected) {
  std::int32_t t = 0;
  float s = 1.0f;
  EXPECT_THROW(update_scale_cpu(nullptr, &t, nullptr, 0.0f, {}), std::invalid_argument);
  EXPECT_THROW(update_scale_cpu(&s, nullptr, nullptr, 0.0f, {}), std::invalid_argument);
}

}  // namespace
}  // namespace autocastgen::kernels
