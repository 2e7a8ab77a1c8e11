// The step-time model under a kernel cost table: a flat table at the
// cluster's own rates changes nothing, each GEMM pass takes its own
// table's rate, a table in which short GEMMs run slowly makes small
// micro batches cost more per token, as they do on the device, and the
// ring's blocks take the table's block-attention rate.
#include <gtest/gtest.h>

#include <memory>

#include "tests/plan/plan_test_util.h"
#include "tools/plan/kernel_costs.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_cost.h"
#include "tools/plan/step_work.h"

namespace trellis {
namespace {

ClusterSpec Cluster() {
  ClusterSpec c = plantest::RoundCluster();
  c.gemm_efficiency = 0.8;
  c.memory_bandwidth = 2e10;
  return c;
}

RateGrid Flat(double rate) {
  RateGrid g;
  g.axes = {std::vector<double>{1}, {1}, {1}};
  g.rates = {rate};
  return g;
}

// The cluster's rates as a table; the roofline out of the way.
KernelCosts FlatTable(const ClusterSpec& c) {
  KernelCosts k;
  k.peak_flops = k.memory_bandwidth = 1e30;
  k.gemm_forward = k.gemm_backward_input = k.gemm_backward_weight =
      Flat(c.peak_flops * c.gemm_efficiency);
  k.attention = Flat(c.peak_flops * c.attention_efficiency);
  k.elementwise = Flat(c.memory_bandwidth);
  k.adamw = Flat(c.memory_bandwidth);
  return k;
}

TrainOptions Model(int64_t micro_batch, int64_t dp = 1, int64_t pp = 1) {
  TrainOptions o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.d_model = 96;
  o.model.seq_len = 64;
  o.model.vocab_size = 257;
  o.global_batch_size = 16;
  o.micro_batch_size = micro_batch;
  o.dp = dp;
  o.pp = pp;
  EXPECT_TRUE(ValidateLayout(o, static_cast<int>(dp * pp)).ok());
  return o;
}

double Step(const TrainOptions& o, const ClusterSpec& c) {
  absl::StatusOr<StepEstimate> e = EstimateStep(o, PlanStages(o), c);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? e->step : 0;
}

TEST(KernelCostStepTest, AFlatTableAtTheClustersRatesChangesNothing) {
  ClusterSpec plain = Cluster();
  ClusterSpec tabled = plain;
  tabled.kernel_costs = std::make_shared<const KernelCosts>(FlatTable(plain));
  for (const TrainOptions& o : {Model(2), Model(4, 2), Model(2, 1, 2)}) {
    EXPECT_NEAR(Step(o, tabled), Step(o, plain), 1e-9 * Step(o, plain))
        << LayoutName(o);
  }
}

TEST(KernelCostStepTest, EachGemmPassTakesItsOwnRate) {
  ClusterSpec c = Cluster();
  KernelCosts k = FlatTable(c);
  const TrainOptions o = Model(2);
  const std::vector<StageFacts> stages = PlanStages(o);
  c.kernel_costs = std::make_shared<const KernelCosts>(k);
  const ChunkWork before = PlanChunkWork(o, stages[0], 0, c);
  k.gemm_backward_weight = Flat(c.peak_flops * c.gemm_efficiency / 2);
  c.kernel_costs = std::make_shared<const KernelCosts>(k);
  const ChunkWork after = PlanChunkWork(o, stages[0], 0, c);
  // F holds the head's weight gradient (2·rows·V·C FLOPs), now at half
  // the rate; B holds no weight gradient.
  const double head_w = 2.0 * 128 * 257 * 96 / (c.peak_flops * 0.8);
  EXPECT_NEAR(after.f.compute, before.f.compute + head_w, 1e-12);
  EXPECT_DOUBLE_EQ(after.b.compute, before.b.compute);
  // The trainer's W is the blocks' weight-gradient GEMMs alone.
  EXPECT_NEAR(after.w.compute, 2 * before.w.compute, 1e-15);
}

TEST(KernelCostStepTest, ShortGemmsCostMorePerTokenWhenTheTableSaysSo) {
  ClusterSpec c = Cluster();
  KernelCosts k = FlatTable(c);
  // GEMMs on 64 rows at a quarter of the rate they reach on 512.
  RateGrid by_rows;
  by_rows.axes = {std::vector<double>{64, 512}, {1}, {1}};
  by_rows.rates = {2e9, 8e9};
  k.gemm_forward = k.gemm_backward_input = k.gemm_backward_weight = by_rows;
  c.kernel_costs = std::make_shared<const KernelCosts>(k);
  // The same 16 windows a step either way: 16 microbatches of 64 rows or
  // 2 of 512.
  const double small = Step(Model(1), c), large = Step(Model(8), c);
  EXPECT_GT(small, 2.5 * large);
  // Under one rate for every GEMM the two differ by far less.
  const double flat_small = Step(Model(1), Cluster());
  const double flat_large = Step(Model(8), Cluster());
  EXPECT_LT(flat_small, 1.2 * flat_large);
}

// Under cp the ring attends blocks of T/cp tokens at the table's
// block-attention rate where it has one; all-to-all keeps the whole
// window's rate.
TEST(KernelCostStepTest, RingBlocksTakeTheBlockAttentionRate) {
  ClusterSpec c = Cluster();
  KernelCosts k = FlatTable(c);
  c.kernel_costs = std::make_shared<const KernelCosts>(k);
  TrainOptions ring = Model(2);
  ring.cp = 2;
  ASSERT_TRUE(ValidateLayout(ring, 2).ok());
  TrainOptions a2a = ring;
  a2a.cp_comm = "a2a";
  const StageFacts ring_stage = PlanStages(ring)[0];
  const StageFacts a2a_stage = PlanStages(a2a)[0];
  const ChunkWork ring_before = PlanChunkWork(ring, ring_stage, 0, c);
  const ChunkWork a2a_before = PlanChunkWork(a2a, a2a_stage, 0, c);
  k.block_attention = Flat(c.peak_flops * c.attention_efficiency / 2);
  c.kernel_costs = std::make_shared<const KernelCosts>(k);
  const ChunkWork ring_after = PlanChunkWork(ring, ring_stage, 0, c);
  const ChunkWork a2a_after = PlanChunkWork(a2a, a2a_stage, 0, c);
  // The blocks' attention (forward 2·rows·T·attn FLOPs per layer, rows =
  // 2 windows of T/cp) now at half the rate: twice its time added.
  const double attention =
      4 * 2.0 * (2 * 32) * 64 * 96 / (c.peak_flops * c.attention_efficiency);
  EXPECT_NEAR(ring_after.f.compute, ring_before.f.compute + attention, 1e-12);
  EXPECT_GT(ring_after.b.compute, ring_before.b.compute);
  EXPECT_DOUBLE_EQ(a2a_after.f.compute, a2a_before.f.compute);
  EXPECT_DOUBLE_EQ(a2a_after.b.compute, a2a_before.b.compute);
}

}  // namespace
}  // namespace trellis
