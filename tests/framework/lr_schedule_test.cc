#include "framework/lr_schedule.h"

#include <gtest/gtest.h>

namespace trellis {
namespace {

constexpr LrSchedule kSchedule{
    .max_lr = 6e-4, .min_lr = 6e-5, .warmup_steps = 10, .total_steps = 110};

TEST(LrScheduleTest, WarmupIsLinearAndEndsAtMax) {
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 0), 6e-5);
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 4), 3e-4);
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 9), 6e-4);
  for (int64_t s = 1; s < 10; ++s) {
    EXPECT_GT(LearningRate(kSchedule, s), LearningRate(kSchedule, s - 1));
  }
}

TEST(LrScheduleTest, CosineDecaysFromMaxToMin) {
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 10), 6e-4);
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 60), (6e-4 + 6e-5) / 2);
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 110), 6e-5);
  EXPECT_DOUBLE_EQ(LearningRate(kSchedule, 1000000), 6e-5);
  for (int64_t s = 11; s <= 120; ++s) {
    EXPECT_LE(LearningRate(kSchedule, s), LearningRate(kSchedule, s - 1));
    EXPECT_GE(LearningRate(kSchedule, s), 6e-5);
  }
  EXPECT_LT(LearningRate(kSchedule, 109), LearningRate(kSchedule, 108));
  EXPECT_GT(LearningRate(kSchedule, 109), 6e-5);
}

TEST(LrScheduleTest, DegenerateSchedules) {
  // No warmup: decay starts at step 0 from max_lr.
  const LrSchedule no_warmup{
      .max_lr = 1.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4};
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 2), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 4), 0.0);
  // Warmup only: min_lr once warmup is over.
  const LrSchedule warmup_only{
      .max_lr = 1.0, .min_lr = 0.25, .warmup_steps = 4, .total_steps = 4};
  EXPECT_DOUBLE_EQ(LearningRate(warmup_only, 3), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(warmup_only, 4), 0.25);
  // Constant: max_lr == min_lr.
  const LrSchedule constant{
      .max_lr = 0.5, .min_lr = 0.5, .warmup_steps = 0, .total_steps = 10};
  for (int64_t s = 0; s < 20; ++s) {
    EXPECT_DOUBLE_EQ(LearningRate(constant, s), 0.5);
  }
}

}  // namespace
}  // namespace trellis
