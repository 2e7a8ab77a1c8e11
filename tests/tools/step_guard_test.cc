// The step guard: the spike detector's window, warm-up and z-scores against
// their formulas; verdicts and skip counts; the test hook's syntax; and a
// one-rank run whose NaN steps are skipped until --max_skipped_steps ends
// it with a checkpoint of the last good step.
#include "tools/trainer/health/step_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The z-score of `value` against `window` by the textbook formula
// (population standard deviation).
double ZOf(const std::vector<double>& window, double value) {
  double mean = 0;
  for (double v : window) mean += v;
  mean /= window.size();
  double var = 0;
  for (double v : window) var += (v - mean) * (v - mean);
  return (value - mean) / std::sqrt(var / window.size());
}

TEST(SpikeDetectorTest, JudgesNothingUntilTheWindowIsFull) {
  SpikeDetector d(4);
  for (double v : {1.0, 2.0, 3.0}) {
    EXPECT_FALSE(d.ZScore(1000).has_value());
    d.Add(v);
  }
  EXPECT_FALSE(d.ZScore(1000).has_value());
  d.Add(4.0);
  ASSERT_TRUE(d.ZScore(1000).has_value());
  EXPECT_NEAR(*d.ZScore(1000), ZOf({1, 2, 3, 4}, 1000), 1e-9);
}

TEST(SpikeDetectorTest, TheWindowSlidesAndSkipsNonFiniteValues) {
  SpikeDetector d(3);
  for (double v : {10.0, 1.0, kNaN, 2.0, kInf, 4.0, -kInf}) d.Add(v);
  // The window holds 1, 2, 4: 10 left it, the non-finite values never came.
  EXPECT_NEAR(*d.ZScore(7), ZOf({1, 2, 4}, 7), 1e-12);
  EXPECT_NEAR(*d.ZScore(0), ZOf({1, 2, 4}, 0), 1e-12);
  EXPECT_LT(*d.ZScore(0), 0);  // below the mean: negative, never a spike
  EXPECT_FALSE(d.ZScore(kNaN).has_value());
}

TEST(SpikeDetectorTest, AFlatWindowJudgesNothing) {
  SpikeDetector d(2);
  d.Add(3);
  d.Add(3);
  EXPECT_FALSE(d.ZScore(100).has_value());
}

// A guard on a group of one, with the given z threshold and give-up count.
StepGuard Guard(double z, int64_t max_skips) {
  StepGuardConfig c;
  c.spike_zscore = z;
  c.max_skipped_steps = max_skips;
  return StepGuard(c, 0);
}

TEST(StepGuardTest, NonFiniteLossOrNormIsSkippedAndCounted) {
  SelfCommunicator world("world");
  StepGuard g = Guard(0, 3);
  EXPECT_EQ(g.Judge(2.0, 1.0, world), SkipReason::kNone);
  EXPECT_EQ(g.Judge(kNaN, 1.0, world), SkipReason::kNonFinite);
  EXPECT_EQ(g.Judge(2.0, kInf, world), SkipReason::kNonFinite);
  EXPECT_EQ(g.consecutive_skips(), 2);
  EXPECT_FALSE(g.GaveUp());
  EXPECT_EQ(g.Judge(2.0, 1.0, world), SkipReason::kNone);
  EXPECT_EQ(g.consecutive_skips(), 0);
  EXPECT_EQ(g.skipped_total(), 2);
  for (int i = 0; i < 3; ++i) g.Judge(2.0, -kInf, world);
  EXPECT_TRUE(g.GaveUp());
  EXPECT_EQ(g.skipped_total(), 5);
}

TEST(StepGuardTest, ZeroMaxSkipsNeverGivesUp) {
  SelfCommunicator world("world");
  StepGuard g = Guard(0, 0);
  for (int i = 0; i < 50; ++i) g.Judge(kNaN, kNaN, world);
  EXPECT_FALSE(g.GaveUp());
  EXPECT_EQ(g.consecutive_skips(), 50);
}

TEST(StepGuardTest, SpikesAreSkippedOnlyAfterTheWarmUpAndOnlyWhenOn) {
  SelfCommunicator world("world");
  const int window = StepGuard::kSpikeWindow;
  StepGuard on = Guard(4, 0);
  StepGuard off = Guard(0, 0);
  // A noisy, falling loss: values alternate ±0.05 around 3 − step/1000.
  auto loss = [](int i) { return 3.0 - i / 1000.0 + (i % 2 ? 0.05 : -0.05); };
  std::vector<double> losses;
  for (int i = 0; i < window; ++i) {
    // A huge value during the warm-up is not judged a spike.
    const double l = i == 0 ? 50.0 : loss(i);
    EXPECT_EQ(on.Judge(l, 1.0 + 0.01 * (i % 3), world), SkipReason::kNone) << i;
    off.Judge(l, 1.0, world);
    losses.push_back(l);
  }
  // After it: the ordinary next value passes; a loss 20 standard deviations
  // up is skipped, by the loss alone or the norm alone.
  losses.erase(losses.begin());
  EXPECT_EQ(on.Judge(loss(window), 1.0, world), SkipReason::kNone);
  losses.push_back(loss(window));
  EXPECT_GT(ZOf(losses, 4.0), 4.0);
  EXPECT_EQ(on.Judge(4.0, 1.0, world), SkipReason::kSpike);
  EXPECT_EQ(on.Judge(loss(window), 100.0, world), SkipReason::kSpike);
  EXPECT_EQ(off.Judge(4.0, 100.0, world), SkipReason::kNone);
  EXPECT_EQ(on.skipped_total(), 2);
}

TEST(StepGuardTest, ALastingLevelChangeStopsBeingASpike) {
  SelfCommunicator world("world");
  StepGuard g = Guard(5, 0);
  for (int i = 0; i < StepGuard::kSpikeWindow; ++i) {
    g.Judge(2.0 + (i % 2 ? 0.01 : -0.01), 1.0, world);
  }
  // The loss jumps to 2.5 and stays: skipped at first, then the new normal.
  int skipped = 0;
  for (int i = 0; i < 20; ++i) {
    if (g.Judge(2.5, 1.0, world) == SkipReason::kSpike) ++skipped;
  }
  EXPECT_GE(skipped, 1);
  EXPECT_LE(skipped, 5);
  EXPECT_EQ(g.Judge(2.5, 1.0, world), SkipReason::kNone);
}

TEST(StepGuardTest, InjectNanHookSyntax) {
  StepGuardConfig c;
  ASSERT_TRUE(ParseInjectNan("", c).ok());
  EXPECT_EQ(c.inject_nan_step, 0);
  ASSERT_TRUE(ParseInjectNan("5:3", c).ok());
  EXPECT_EQ(c.inject_nan_step, 5);
  EXPECT_FALSE(c.inject_nan_onwards);
  EXPECT_EQ(c.inject_nan_rank, 3);
  ASSERT_TRUE(ParseInjectNan("7+:0", c).ok());
  EXPECT_EQ(c.inject_nan_step, 7);
  EXPECT_TRUE(c.inject_nan_onwards);
  for (const char* bad : {"5", "x:1", "0:1", "3:-1", "3:1:2", "+:1"}) {
    const absl::Status s = ParseInjectNan(bad, c);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("STEP:RANK")) << bad;
  }
}

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(StepGuardRunTest, ConsecutiveSkipsSaveTheLastGoodStepAndGiveUp) {
  const std::string dir = test::ScratchDir();
  test::WriteTokenFile(dir + "/tokens.h5", test::kByteVocab);
  TrainOptions o = test::TinyOptions(dir + "/tokens.h5");
  o.steps = 10;
  o.max_skipped_steps = 3;
  o.save_dir = dir + "/ckpt";
  // Every attempt from step 4 on has a NaN gradient.
  const ScopedEnv inject("TRELLIS_TEST_INJECT_NAN", "4+:0");
  const ParallelContext context = ParallelContext::Single();
  std::unique_ptr<Trainer> trainer = test::MakeTrainer(o, context);
  ASSERT_NE(trainer, nullptr);
  const absl::StatusOr<Trainer::Outcome> outcome = trainer->Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, Trainer::Outcome::kGaveUp);
  EXPECT_EQ(trainer->step(), 3);
  EXPECT_EQ(trainer->losses().size(), 6u);  // 3 updates, 3 skips
  for (double loss : trainer->losses()) EXPECT_TRUE(std::isfinite(loss));
  const std::string& message = trainer->give_up_message();
  EXPECT_THAT(message, HasSubstr("3 consecutive steps skipped"));
  EXPECT_THAT(message, HasSubstr("non-finite"));
  EXPECT_THAT(message, HasSubstr("--resume=auto"));
  EXPECT_THAT(message, HasSubstr("--max_skipped_steps"));
  EXPECT_EQ(message.find('\n'), std::string::npos);
  // The checkpoint is step 3's weights with six batches consumed.
  const absl::StatusOr<TrainingState> state =
      ReadTrainingState(o.save_dir + "/" + CheckpointName(3));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 3);
  EXPECT_EQ(state->samples_consumed, 6 * o.global_batch_size);
  for (const Parameter* p : trainer->model().params().all()) {
    for (int64_t i = 0; i < p->numel(); ++i) {
      ASSERT_TRUE(std::isfinite(p->value.data<float>()[i])) << p->name;
    }
  }
}

}  // namespace
}  // namespace trellis
