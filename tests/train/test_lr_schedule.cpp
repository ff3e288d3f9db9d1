// LrSchedule: warm-up, decay shapes, the floor, and never running past the end.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace wmtp {
namespace {

LrScheduleConfig cfg(LrScheduleType type, double warmup, double min_ratio) {
  LrScheduleConfig c;
  c.type = type;
  c.warmup_ratio = warmup;
  c.min_lr_ratio = min_ratio;
  return c;
}

TEST(LrSchedule, ConstantIsFlat) {
  LrSchedule s(cfg(LrScheduleType::Constant, 0.1, 0.5), 2e-4, 100);
  for (int64_t i : {0, 1, 50, 99, 1000}) EXPECT_DOUBLE_EQ(s.lr_at(i), 2e-4);
}

TEST(LrSchedule, CosineWarmsUpThenDecaysToTheFloor) {
  LrSchedule s(cfg(LrScheduleType::Cosine, 0.1, 0.01), 1.0, 100);
  EXPECT_EQ(s.warmup_steps(), 10);
  EXPECT_LT(s.lr_at(0), 1e-6);                         // starts at ~0 (1e-8 x peak)
  EXPECT_NEAR(s.lr_at(5), 0.5, 1e-6);                  // linear warm-up
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);                  // peak right after warm-up
  EXPECT_NEAR(s.lr_at(55), 0.01 + 0.99 * 0.5, 1e-12);  // half way down the cosine
  for (int64_t i = 11; i < 100; ++i) EXPECT_LT(s.lr_at(i), s.lr_at(i - 1));
  EXPECT_GE(s.lr_at(99), 0.01);
  EXPECT_DOUBLE_EQ(s.lr_at(150), s.lr_at(99));  // clamped: never past its end
}

TEST(LrSchedule, LinearDecaysTowardsMinRatioLikePyTorch) {
  // As torch's LinearLR/CosineAnnealingLR over (total - warmup) steps: step s uses
  // t = (s - warmup) / (total - warmup), so the last step (s = total - 1) is one step short of the floor.
  LrSchedule s(cfg(LrScheduleType::Linear, 0.0, 0.1), 1.0, 11);
  EXPECT_EQ(s.warmup_steps(), 0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_NEAR(s.lr_at(5), 1.0 - 0.9 * 5.0 / 11.0, 1e-12);
  EXPECT_NEAR(s.lr_at(10), 1.0 - 0.9 * 10.0 / 11.0, 1e-12);
  EXPECT_GT(s.lr_at(10), 0.1);
}

TEST(LrSchedule, WarmupIsAtLeastOneStepAndBadRatiosAreRefused) {
  LrSchedule s(cfg(LrScheduleType::Cosine, 0.001, 0.0), 1.0, 10);
  EXPECT_EQ(s.warmup_steps(), 1);
  EXPECT_THROW(LrSchedule(cfg(LrScheduleType::Cosine, 1.5, 0.0), 1.0, 10), Error);
  EXPECT_THROW(LrSchedule(cfg(LrScheduleType::Cosine, 0.1, -0.1), 1.0, 10), Error);
}

}  // namespace
}  // namespace wmtp
