// The planner on a mixture of experts: a token's GEMM work is the router
// and the k experts it is routed to, not every expert the layer holds,
// whether the experts sit on one rank or are split over ep of them; dense
// and expert layers of one model are each costed at their own shapes.
#include <gtest/gtest.h>

#include "tests/plan/plan_test_util.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_cost.h"
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

}  // namespace
}  // namespace trellis
