// A training step blocks the host on the device at most twice: once for the
// global gradient norm, once for the step's loss. Microbatch losses add up
// on the device and tokens go up without waiting. On the CPU the framework
// counts the same call sites (framework/host_sync.h), so this holds the
// trainer to the budget without a GPU; tests/cuda/cuda_trainer_test.cc
// checks it on one.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/host_sync.h"
#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

class TrainerHostWaitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab, 20000);
  }

  std::unique_ptr<Trainer> Make(const TrainOptions& o) {
    return test::MakeTrainer(o, context_);
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_, data_;
};

TEST_F(TrainerHostWaitTest, AStepWaitsForTheDeviceAtMostTwice) {
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kGPipe}) {
    TrainOptions o = test::TinyOptions(data_);
    o.micro_batch_size = 2;  // eight microbatches
    o.schedule = schedule;
    const std::unique_ptr<Trainer> trainer = Make(o);
    ASSERT_NE(trainer, nullptr);
    ASSERT_EQ(o.global_batch_size / o.micro_batch_size, 8);
    ASSERT_TRUE(trainer->Step().ok());  // the first step may set up
    for (int step = 0; step < 2; ++step) {
      ResetHostWaits();
      const absl::StatusOr<StepMetrics> m = trainer->Step();
      ASSERT_TRUE(m.ok()) << m.status();
      // The gradient norm and the loss: never one per microbatch.
      EXPECT_EQ(HostWaits(), 2) << schedule << ", step " << m->step;
      EXPECT_GT(m->loss, 0.0);
    }
  }
}

// A mixture of experts reads each MoE layer's routing to the host twice
// per training microbatch: its expert counts once in the forward (every
// later use of them, backward included, reads that copy) and its balance
// losses once for the routing report.
TEST_F(TrainerHostWaitTest, AMixtureReadsEachLayersRoutingTwicePerMicrobatch) {
  for (const Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    TrainOptions o = test::TinyMixture(test::TinyOptions(data_));
    o.micro_batch_size = 2;  // eight microbatches
    o.recompute = recompute;
    const std::unique_ptr<Trainer> trainer = Make(o);
    ASSERT_NE(trainer, nullptr);
    ASSERT_TRUE(trainer->Step().ok());
    ResetHostWaits();
    const absl::StatusOr<StepMetrics> m = trainer->Step();
    ASSERT_TRUE(m.ok()) << m.status();
    // Full recomputation reruns the forward in backward: its counts once
    // more, its losses not.
    const int64_t per_microbatch = recompute == Recompute::kFull ? 3 : 2;
    EXPECT_EQ(HostWaits(), 2 + 2 * 8 * per_microbatch)
        << static_cast<int>(recompute);
  }
}

TEST_F(TrainerHostWaitTest, TheStepLossCountsEveryMicrobatchOnce) {
  // Equal microbatches: the mean of their mean losses is the mean over the
  // whole batch, however it is cut. A total that missed a microbatch, or
  // kept the last step's, would tell one microbatch from eight.
  auto losses = [&](int64_t micro_batch) {
    TrainOptions o = test::TinyOptions(data_);
    o.micro_batch_size = micro_batch;
    o.steps = 3;
    const std::unique_ptr<Trainer> trainer = Make(o);
    EXPECT_NE(trainer, nullptr);
    if (trainer == nullptr) return std::vector<double>{};
    EXPECT_TRUE(trainer->Run().ok());
    return trainer->losses();
  };
  const std::vector<double> whole = losses(16), cut = losses(2);
  ASSERT_EQ(whole.size(), 3u);
  ASSERT_EQ(cut.size(), 3u);
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(cut[i], whole[i], 1e-4 * whole[i]) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace trellis
