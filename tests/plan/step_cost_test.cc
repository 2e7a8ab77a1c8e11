// The step-time model: its parts add up, each responds to the rate it is
// made of, and the pipeline part is the schedule simulator's.
#include "tools/plan/step_cost.h"

#include <gtest/gtest.h>

#include <limits>

#include "parallel/schedule.h"
#include "tests/plan/plan_test_util.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/planner.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_work.h"

namespace trellis {
namespace {

using plantest::Estimate;
using plantest::PartsSum;

ClusterSpec TestCluster() { return plantest::RoundCluster(); }

TrainOptions Layout(int64_t dp, int64_t tp, int64_t pp,
                    ScheduleKind kind = ScheduleKind::k1F1B) {
  TrainOptions o;
  o.model.n_layer = 8;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.seq_len = 64;
  o.model.vocab_size = 257;
  o.global_batch_size = 16;
  o.micro_batch_size = 2;
  o.dp = dp;
  o.tp = tp;
  o.pp = pp;
  o.schedule = kind;
  EXPECT_TRUE(ValidateLayout(o, static_cast<int>(dp * tp * pp)).ok());
  return o;
}

TEST(StepCostTest, PartsAddUpToTheStep) {
  for (const TrainOptions& o :
       {Layout(1, 1, 1), Layout(2, 2, 2), Layout(1, 1, 4, ScheduleKind::kGPipe),
        Layout(2, 1, 4, ScheduleKind::kZeroBubbleH1)}) {
    const StepEstimate e = Estimate(o, TestCluster());
    EXPECT_NEAR(PartsSum(e), e.step, 1e-9 * e.step) << LayoutName(o);
    EXPECT_GT(e.compute, 0);
  }
}

TEST(StepCostTest, OneRankHasNoCommunicationOrBubble) {
  const StepEstimate e = Estimate(Layout(1, 1, 1), TestCluster());
  EXPECT_EQ(e.tp_comm, 0);
  EXPECT_EQ(e.pp_comm, 0);
  EXPECT_EQ(e.dp_comm, 0);
  EXPECT_NEAR(e.bubble, 0, 1e-12);
}

TEST(StepCostTest, ComputeScalesWithThePeak) {
  ClusterSpec fast = TestCluster();
  fast.peak_flops *= 2;
  fast.memory_bandwidth *= 2;
  const StepEstimate slow_e = Estimate(Layout(1, 1, 1), TestCluster());
  const StepEstimate fast_e = Estimate(Layout(1, 1, 1), fast);
  EXPECT_NEAR(fast_e.compute, slow_e.compute / 2, 1e-9);
  EXPECT_NEAR(fast_e.optimizer, slow_e.optimizer / 2, 1e-12);
}

TEST(StepCostTest, CommunicationFollowsTheLinks) {
  ClusterSpec c = TestCluster();
  const StepEstimate e = Estimate(Layout(1, 2, 2), c);
  EXPECT_GT(e.tp_comm, 0);
  EXPECT_GT(e.pp_comm, 0);
  c.intra = {std::numeric_limits<double>::infinity(), 0};
  const StepEstimate free = Estimate(Layout(1, 2, 2), c);
  EXPECT_EQ(free.tp_comm, 0);
  EXPECT_NEAR(free.pp_comm, 0, 1e-12);
}

TEST(StepCostTest, AsyncGradientSyncHidesBehindBackward) {
  ClusterSpec c = TestCluster();
  // One bucket is ready only when the last W ends: nothing to hide.
  const StepEstimate one = Estimate(Layout(4, 1, 1), c);
  EXPECT_GT(one.dp_comm_total, 0);
  EXPECT_NEAR(one.dp_comm, one.dp_comm_total, 1e-12);
  // Small buckets start while later ones are still being produced.
  TrainOptions small = Layout(4, 1, 1);
  small.dp_bucket_mb = 0.25;
  const StepEstimate async = Estimate(small, c);
  EXPECT_LT(async.dp_comm, 0.9 * async.dp_comm_total);
  c.async_collectives = false;
  const StepEstimate blocking = Estimate(small, c);
  EXPECT_NEAR(blocking.dp_comm, blocking.dp_comm_total, 1e-12);
}

TEST(StepCostTest, ZeroOneAddsTheWeightAllGatherAndShardsAdam) {
  TrainOptions z0 = Layout(4, 1, 1), z1 = Layout(4, 1, 1);
  z1.zero = 1;
  ClusterSpec c = TestCluster();
  c.intra = {std::numeric_limits<double>::infinity(), 0};
  const StepEstimate e0 = Estimate(z0, c), e1 = Estimate(z1, c);
  // With free links, only AdamW's share remains: a quarter of it.
  EXPECT_NEAR(e1.optimizer, e0.optimizer / 4, 1e-3 * e0.optimizer);
}

// ZeRO-2 on a pipeline with middle stages (no embedding there): planned
// like the others, with its reduce-scatters once per microbatch.
TEST(StepCostTest, ZeroTwoPlansMiddleStagesAndSyncsEveryMicrobatch) {
  TrainOptions z1 = Layout(2, 1, 4), z2 = Layout(2, 1, 4);
  z1.zero = 1;
  z2.zero = 2;
  const StepEstimate e1 = Estimate(z1, TestCluster());
  const StepEstimate e2 = Estimate(z2, TestCluster());
  EXPECT_GT(e2.dp_comm_total, 2 * e1.dp_comm_total);
}

// ZeRO-3 gathers every unit's weights before F and B, and before the
// deferred W under ZB-H1: half as many gathers again there. With blocks
// that compute longer than their gathers take, only the first unit's
// gather of each pass is waited for; without asynchronous collectives
// every gather is.
TEST(StepCostTest, ZeroThreeGathersPerPassMostlyBehindCompute) {
  TrainOptions plain = Layout(2, 1, 2), zb = Layout(2, 1, 2);
  plain.zero = zb.zero = 3;
  zb.schedule = ScheduleKind::kZeroBubbleH1;
  ASSERT_TRUE(ValidateLayout(plain, 4).ok());
  ASSERT_TRUE(ValidateLayout(zb, 4).ok());
  const int gather = static_cast<int>(CommOp::kAllGather);
  const std::vector<StageFacts> stages = PlanStages(plain);
  const std::vector<StageFacts> zb_stages = PlanStages(zb);
  for (size_t p = 0; p < stages.size(); ++p) {
    const int64_t two = PlannedStepTraffic(plain, stages[p]).dp.calls[gather];
    const int64_t three = PlannedStepTraffic(zb, zb_stages[p]).dp.calls[gather];
    // At least one bucket per unit (4 blocks and an end) and pass.
    EXPECT_GE(two, 2 * plain.microbatches() * 5);
    EXPECT_EQ(3 * two, 2 * three);
  }
  const StepEstimate e = Estimate(plain, TestCluster());
  EXPECT_NEAR(PartsSum(e), e.step, 1e-9 * e.step);
  EXPECT_GT(e.dp_gather, 0);
  EXPECT_LT(e.dp_gather, 0.5 * e.dp_gather_total);
  ClusterSpec blocking = TestCluster();
  blocking.async_collectives = false;
  const StepEstimate b = Estimate(plain, blocking);
  EXPECT_NEAR(b.dp_gather, b.dp_gather_total, 1e-12);
  EXPECT_NEAR(b.dp_gather_total, e.dp_gather_total, 1e-12);
  // The trainer's plan: a share of the weights, not all of them.
  TrainOptions z0 = plain;
  z0.zero = 0;
  EXPECT_LT(stages[0].memory.weights, PlanStages(z0)[0].memory.weights);
}

TEST(StepCostTest, SplitBackwardRatioScalesOnlyZeroBubbleBackward) {
  ClusterSpec c = TestCluster();
  c.intra = {std::numeric_limits<double>::infinity(), 0};
  ClusterSpec dear = c;
  dear.split_backward_ratio = 1.5;
  const TrainOptions zb = Layout(1, 1, 1), plain = Layout(1, 1, 1);
  TrainOptions zb1 = zb;
  zb1.schedule = ScheduleKind::kZeroBubbleH1;
  // One stage: compute = F + B + W of every microbatch and chunk.
  const StepEstimate base = Estimate(zb1, c), split = Estimate(zb1, dear);
  const StepEstimate fused = Estimate(plain, dear);
  EXPECT_NEAR(fused.compute, Estimate(plain, c).compute, 1e-12);
  EXPECT_NEAR(base.compute, fused.compute, 1e-12);
  // The blocks' backward (about two thirds of their work) grows by half;
  // F and the head do not.
  EXPECT_GT(split.compute, 1.2 * base.compute);
  EXPECT_LT(split.compute, 1.5 * base.compute);
}

TEST(StepCostTest, UniformStagesReproduceTheTextbookBubble) {
  // Costs per chunk equal on every stage: the simulator's 1F1B bubble.
  const int pp = 4, m = 8;
  const auto schedules = BuildAllSchedules(ScheduleKind::k1F1B, pp, m);
  absl::StatusOr<ScheduleSimulation> one =
      SimulateSchedules(schedules, 1, ActionCosts{1.0, 1.0, 0.0, 0.0});
  absl::StatusOr<ScheduleSimulation> per_chunk = SimulateSchedules(
      schedules, 1, std::vector<ActionCosts>(pp, ActionCosts{1, 1, 0, 0}));
  ASSERT_TRUE(one.ok() && per_chunk.ok());
  EXPECT_DOUBLE_EQ(one->makespan, per_chunk->makespan);
  EXPECT_NEAR(per_chunk->BubbleFraction(),
              TheoreticalBubble(ScheduleKind::k1F1B, pp, m), 1e-9);
  // A last stage twice as slow sets the pace: m of its F + B, plus the
  // warm-up of the three stages before it.
  std::vector<ActionCosts> costs(pp, ActionCosts{1, 1, 0, 0});
  costs[pp - 1] = ActionCosts{2, 2, 0, 0};
  absl::StatusOr<ScheduleSimulation> slow =
      SimulateSchedules(schedules, 1, costs);
  ASSERT_TRUE(slow.ok());
  EXPECT_DOUBLE_EQ(slow->busy[pp - 1], m * 4.0);
  EXPECT_DOUBLE_EQ(slow->makespan, m * 4.0 + 2 * (pp - 1));
}

}  // namespace
}  // namespace trellis
