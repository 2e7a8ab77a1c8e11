// The planner on a mixture of experts: a token's GEMM work is the router
// and the k experts it is routed to, not every expert the layer holds,
// whether the experts sit on one rank or are split over ep of them; dense
// and expert layers of one model are each costed at their own shapes;
// expert parallelism is searched and its token exchanges cost what they
// send.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/plan/plan_test_util.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_cost.h"
#include "tools/plan/step_work.h"
#include "transformer/moe/moe_family.h"

namespace trellis {
namespace {

constexpr int64_t kWidth = 64, kFfn = 96, kExpertFfn = 32;

TrainOptions Mixture(int64_t experts, int64_t ep = 1) {
  TrainOptions o;
  o.model.family = moe::kKind;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.n_kv_heads = 4;
  o.model.d_model = kWidth;
  o.model.ffn_hidden = kFfn;
  o.model.experts = experts;
  o.model.experts_per_token = 2;
  o.model.moe_ffn_hidden = kExpertFfn;
  o.model.moe_first_dense = 1;
  o.model.seq_len = 32;
  o.model.vocab_size = 257;
  o.global_batch_size = 8;
  o.micro_batch_size = 2;
  o.dp = ep;
  o.ep = ep;
  const absl::Status ok = ValidateLayout(o, static_cast<int>(ep));
  EXPECT_TRUE(ok.ok()) << ok;
  return o;
}

TEST(ExpertCostTest, ATokenCostsItsKExpertsAndTheRouter) {
  const double attention = 4.0 * kWidth * kWidth;
  for (const int64_t ep : {1, 2, 4}) {
    const TrainOptions o = Mixture(4, ep);
    SCOPED_TRACE(ep);
    // Layer 0 is dense: its SwiGLU MLP's three matrices.
    EXPECT_DOUBLE_EQ(BlockGemmElements(o, 0), attention + 3.0 * kWidth * kFfn);
    // Layers 1..3: the router and two experts' worth per row.
    EXPECT_DOUBLE_EQ(BlockGemmElements(o, 1),
                     attention + kWidth * 4.0 + 2 * 3.0 * kWidth * kExpertFfn);
  }
}

// More experts of the same size and k leave a token's work alone (but for
// the router's columns): the step's compute grows by that alone.
TEST(ExpertCostTest, MoreExpertsDoNotMakeATokenDearer) {
  const ClusterSpec c = plantest::RoundCluster();
  auto compute = [&c](const TrainOptions& o) {
    absl::StatusOr<StepEstimate> e = EstimateStep(o, PlanStages(o), c);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->compute : 0.0;
  };
  const TrainOptions four = Mixture(4), sixteen = Mixture(16);
  const double rows = 2.0 * 32;
  const double microbatches = static_cast<double>(four.microbatches());
  // Router columns 4 → 16 on three expert layers, three passes.
  const double router = microbatches * 3 * 3 * 2 * rows * kWidth * 12.0 /
                        (c.peak_flops * c.gemm_efficiency);
  EXPECT_NEAR(compute(sixteen) - compute(four), router, 1e-6 * router);
}

// Expert parallelism: per expert layer and microbatch, forward the slot
// counts, the routed rows out and the outputs back, backward the two
// gradients, each ep-1 blocking sends of 1/ep of the N·k rows; the
// GEMMs cost as without ep.
TEST(ExpertCostTest, ExpertParallelismWaitsForItsExchanges) {
  const ClusterSpec c = plantest::RoundCluster();
  const TrainOptions o = Mixture(4, 2);
  absl::StatusOr<StepEstimate> e = EstimateStep(o, PlanStages(o), c);
  ASSERT_TRUE(e.ok()) << e.status();
  const double rows = 2.0 * 32 * 2 * kWidth * 4 / 2;  // N·k·C floats / ep
  const double counts = 4.0 * 4 / 2;                  // E/ep int32
  auto send = [&c](double bytes) {
    return c.intra.latency + bytes / c.intra.bandwidth;
  };
  const double per_layer = 4 * send(rows) + send(counts);
  const double expected =
      static_cast<double>(o.microbatches()) * 3 * per_layer;  // 3 MoE layers
  EXPECT_NEAR(e->ep_comm, expected, 1e-9 * expected);
  TrainOptions whole = Mixture(4, 1);
  whole.dp = 2;
  ASSERT_TRUE(ValidateLayout(whole, 2).ok());
  absl::StatusOr<StepEstimate> one = EstimateStep(whole, PlanStages(whole), c);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->ep_comm, 0);
  EXPECT_NEAR(e->compute, one->compute, 1e-9 * one->compute);
}

// The experts' gradients sync over the ranks holding the same experts
// (dp / ep of them), in buckets of their own: on dp4 the experts' bytes
// all-reduce over 2 ranks under ep 2 and not at all under ep 4, where
// each rank alone holds its experts; under ZeRO-3 their weights gather
// over those ranks too. So the dp sync shrinks as ep grows.
TEST(ExpertCostTest, ExpertGradientsSyncOverTheRanksHoldingThem) {
  const ClusterSpec c = plantest::RoundCluster();
  auto on_dp4 = [](int64_t ep, int64_t zero) {
    TrainOptions o = Mixture(4);
    o.dp = 4;
    o.ep = ep;
    o.zero = zero;
    const absl::Status ok = ValidateLayout(o, 4);
    EXPECT_TRUE(ok.ok()) << ok;
    return o;
  };
  const int all_reduce = static_cast<int>(CommOp::kAllReduce);
  const int all_gather = static_cast<int>(CommOp::kAllGather);
  double last = 0;
  for (const int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE(ep);
    const TrainOptions o = on_dp4(ep, 0);
    const StageFacts stage = PlanStages(o)[0];
    const PlannedTraffic t = PlannedStepTraffic(o, stage);
    int64_t expert_bytes = 0;
    for (int64_t b : stage.expert_buckets) expert_bytes += b;
    // Three layers of 4/ep experts, 3·C·Fe float32 elements each.
    const int64_t held = ep == 1 ? 0 : 3 * (4 / ep) * 3 * kWidth * kExpertFfn;
    EXPECT_EQ(stage.expert_parameters, held);
    EXPECT_EQ(expert_bytes, 4 * held);
    EXPECT_EQ(t.expert_dp.bytes[all_reduce], ep == 2 ? expert_bytes : 0);
    EXPECT_EQ(t.expert_dp.calls[all_reduce],
              ep == 2 ? static_cast<int64_t>(stage.expert_buckets.size()) : 0);
    const double dp_comm = plantest::Estimate(o, c).dp_comm_total;
    if (ep > 1) {
      EXPECT_LT(dp_comm, last);
    }
    last = dp_comm;
    // ZeRO-3: the experts' weights gathered over their two holders only.
    const TrainOptions z = on_dp4(ep, 3);
    const PlannedTraffic g = PlannedStepTraffic(z, PlanStages(z)[0]);
    EXPECT_EQ(g.expert_dp.calls[all_gather] > 0, ep == 2);
    EXPECT_GT(g.dp.calls[all_gather], 0);
  }
}

// The search splits a mixture's experts over every ep that divides both
// the data-parallel ranks and the experts, and a dense model's never.
TEST(ExpertCostTest, TheSearchTriesExpertParallelism) {
  std::set<int64_t> sizes;
  for (const TrainOptions& o :
       EnumerateLayouts(Mixture(4), 8, SearchLimits{})) {
    sizes.insert(o.ep);
    EXPECT_EQ(o.gradient_replicas() % o.ep, 0) << LayoutName(o);
    if (o.ep > 1) {
      EXPECT_NE(LayoutName(o).find(".ep"), std::string::npos);
    }
  }
  EXPECT_EQ(sizes, (std::set<int64_t>{1, 2, 4}));
  TrainOptions dense = Mixture(4);
  dense.model.family = ModelFamilyKind("llama");
  dense.model.experts = 0;
  for (const TrainOptions& o : EnumerateLayouts(dense, 4, SearchLimits{})) {
    EXPECT_EQ(o.ep, 1) << LayoutName(o);
  }
}

}  // namespace
}  // namespace trellis
