// The planner under context parallelism: every per-token cost falls by cp
// (copies around the transfers added), the activations shrink, the gradients
// sync over dp·cp, and the ring's and all-to-all's transfers cost what their
// formulas say: the ring's forward sends hidden behind a block of attention
// where transfers progress beside compute, its gradient sends waited for,
// all-to-all's exchanges all waited for.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "tests/plan/plan_test_util.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/planner.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_cost.h"
#include "tools/plan/step_work.h"

namespace trellis {
namespace {

using plantest::Estimate;
using plantest::PartsSum;

// Rates without a kernel table: every shape at the peak × efficiencies.
ClusterSpec Cluster() { return plantest::RoundCluster(); }

constexpr int64_t kLayers = 8, kWidth = 128, kSeq = 64, kMicro = 2;

TrainOptions Layout(int64_t dp, int64_t cp, int64_t tp, const char* comm) {
  TrainOptions o;
  o.model.n_layer = kLayers;
  o.model.n_head = 4;
  o.model.d_model = kWidth;
  o.model.seq_len = kSeq;
  o.model.vocab_size = 257;
  o.global_batch_size = 16;
  o.micro_batch_size = kMicro;
  o.dp = dp;
  o.cp = cp;
  o.cp_comm = comm;
  o.tp = tp;
  const absl::Status ok = ValidateLayout(o, static_cast<int>(dp * cp * tp));
  EXPECT_TRUE(ok.ok()) << ok;
  return o;
}

// One send of `bytes` on `link`.
double Send(double bytes, const LinkSpec& link) {
  return link.latency + bytes / link.bandwidth;
}

TEST(ContextCostTest, PerTokenWorkAndActivationsFallByCp) {
  const ClusterSpec c = Cluster();
  const TrainOptions whole = Layout(1, 1, 1, "ring");
  const StepEstimate one = Estimate(whole, c);
  const double activations =
      static_cast<double>(PlanStages(whole)[0].memory.activations);
  for (const char* comm : {"ring", "a2a"}) {
    for (int64_t cp : {2, 4}) {
      const TrainOptions o = Layout(1, cp, 1, comm);
      const StepEstimate e = Estimate(o, c);
      SCOPED_TRACE(LayoutName(o));
      EXPECT_NEAR(PartsSum(e), e.step, 1e-9 * e.step);
      // At one rate for every shape, the rank's share of every kernel, and
      // the copies around the transfers: qkv split and joined and the
      // merges (ring), the exchanges' buffers packed and unpacked (a2a).
      const double rows = kMicro * kSeq / static_cast<double>(cp);
      const double out = rows * kWidth * 4, qkv = 3 * out;
      const double copies = o.cp_comm == "ring"
                                ? 2 * qkv + 4 * (cp - 1) * out + 5 * qkv
                                : 8 * (qkv + out);
      const double blocks = static_cast<double>(kLayers * o.microbatches());
      EXPECT_NEAR(e.compute,
                  one.compute / static_cast<double>(cp) +
                      blocks * copies / c.memory_bandwidth,
                  1e-9 * one.compute);
      EXPECT_GT(e.cp_comm, 0);
      EXPECT_EQ(e.tp_comm, 0);
      // The gradients are averaged over the cp ranks.
      EXPECT_GT(e.dp_comm_total, 0);
      const double mine =
          static_cast<double>(PlanStages(o)[0].memory.activations);
      EXPECT_LT(mine, activations / static_cast<double>(cp) * 1.5);
    }
  }
}

// cp 2 ring: per block and microbatch, one key/value block sent beside
// half of the forward attention, one beside half of the backward's, the
// gradient of the block in hand beside the other half, and the last
// gradient home, waited for.
TEST(ContextCostTest, RingHidesItsBlocksBehindAttention) {
  ClusterSpec c = Cluster();
  const TrainOptions o = Layout(1, 2, 1, "ring");
  const double rows = kMicro * kSeq / 2.0;
  const double attention =
      2 * rows * kSeq * kWidth / (c.peak_flops * c.attention_efficiency);
  const double kv = rows * 2 * kWidth * 4;
  const double blocks = static_cast<double>(kLayers * o.microbatches());
  for (double bandwidth : {1e9, 1e7}) {
    c.intra.bandwidth = bandwidth;
    c.inter = c.intra;
    const double s = Send(kv, c.intra);
    const double forward = std::max(0.0, s - attention / 2);
    const double backward = 2 * std::max(0.0, s - attention) + s;
    SCOPED_TRACE(bandwidth);
    EXPECT_NEAR(Estimate(o, c).cp_comm, blocks * (forward + backward),
                1e-9 * blocks * (forward + backward));
  }
  // Where transfers progress only inside MPI calls (CPU ranks), no block
  // hides a send: four of them per block and microbatch, waited for.
  ClusterSpec mpi = Cluster();
  ASSERT_TRUE(mpi.async_collectives);
  const double hidden = Estimate(o, mpi).cp_comm;
  mpi.async_collectives = false;
  EXPECT_NEAR(Estimate(o, mpi).cp_comm, blocks * 4 * Send(kv, mpi.intra),
              1e-9 * blocks * 4 * Send(kv, mpi.intra));
  EXPECT_GT(Estimate(o, mpi).cp_comm, hidden);
  // On a fast link the forward's transfer is hidden whole.
  EXPECT_GT(attention / 2, Send(kv, Cluster().intra));
  c.intra = {std::numeric_limits<double>::infinity(), 0};
  c.inter = c.intra;
  EXPECT_EQ(Estimate(o, c).cp_comm, 0);
}

// All-to-all: per block and microbatch, qkv in and the output back, their
// gradients in backward, each cp-1 sends of a cp-th of the buffer.
TEST(ContextCostTest, AllToAllWaitsForItsFourExchanges) {
  const ClusterSpec c = Cluster();
  for (int64_t cp : {2, 4}) {
    const TrainOptions o = Layout(1, cp, 1, "a2a");
    const double rows = kMicro * kSeq / static_cast<double>(cp);
    const double out = rows * kWidth * 4, qkv = 3 * out;
    const double per_block =
        2 * static_cast<double>(cp - 1) *
        (Send(qkv / cp, c.intra) + Send(out / cp, c.intra));
    const double blocks = static_cast<double>(kLayers * o.microbatches());
    EXPECT_NEAR(Estimate(o, c).cp_comm, blocks * per_block,
                1e-9 * blocks * per_block)
        << cp;
  }
}

// The counted calls: the collective-count formulas (ring 3·cp-2 sends per
// block and microbatch, all-to-all 4·(cp-1)), each with its receive;
// selective recompute reruns the forward's.
TEST(ContextCostTest, PlannedTransfersMatchTheFormulas) {
  const int send = static_cast<int>(CommOp::kSend);
  const int recv = static_cast<int>(CommOp::kRecv);
  for (const char* comm : {"ring", "a2a"}) {
    for (Recompute r : {Recompute::kNone, Recompute::kSelective}) {
      TrainOptions o = Layout(1, 4, 1, comm);
      o.recompute = r;
      const PlannedTraffic t = PlannedStepTraffic(o, PlanStages(o)[0]);
      const bool ring = o.cp_comm == "ring";
      int64_t per_block = ring ? 3 * 4 - 2 : 4 * 3;
      if (r == Recompute::kSelective) per_block += ring ? 3 : 2 * 3;
      const int64_t blocks = kLayers * o.microbatches();
      SCOPED_TRACE(LayoutName(o));
      EXPECT_EQ(t.cp.calls[send], blocks * per_block);
      EXPECT_EQ(t.cp.calls[recv], blocks * per_block);
      EXPECT_EQ(t.cp.bytes[send], t.cp.bytes[recv]);
      EXPECT_EQ(t.cp.wire_bytes[send], t.cp.bytes[send]);
      if (ring && r == Recompute::kNone) {
        const int64_t kv = kMicro * kSeq / 4 * 2 * kWidth * 4;
        EXPECT_EQ(t.cp.bytes[send], blocks * per_block * kv);
      }
      // The gradient sync spans dp·cp = 4 ranks.
      EXPECT_EQ(t.dp.wire_bytes[static_cast<int>(CommOp::kAllReduce)],
                t.dp.bytes[static_cast<int>(CommOp::kAllReduce)] * 2 * 3 / 4);
    }
  }
}

// A cp group that spans nodes goes at the inter-node link's speed.
TEST(ContextCostTest, CpGroupAcrossNodesUsesTheSlowerLink) {
  ClusterSpec c = Cluster();
  c.devices_per_node = 2;
  c.nodes = 2;
  // tp innermost: tp pairs share a node, cp pairs do not.
  const TrainOptions o = Layout(1, 2, 2, "ring");
  const double fast = Estimate(o, c).cp_comm;
  c.inter.bandwidth /= 100;
  EXPECT_GT(Estimate(o, c).cp_comm, 10 * fast);
}

// A cp layout given on the command line (trellis-train --plan_only) is
// resolved and planned over all of its ranks.
TEST(ContextCostTest, AGivenCpLayoutIsPlanned) {
  const ClusterSpec c = Cluster();
  TrainOptions given = Layout(2, 2, 1, "ring");
  given.dp = 0;  // from the world
  absl::StatusOr<LayoutPlan> plan = PlanGivenLayout(given, 4, c);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->options.dp, 2);
  EXPECT_EQ(plan->name, "dp2.cp2-ring.tp1.pp1/1f1b/v1/mbs2/z0/none");
  // MFU counts every rank of the layout.
  const double world = 4;
  EXPECT_NEAR(plan->mfu,
              given.model.TrainingFlopsPerToken() * plan->tokens_per_s /
                  (world * c.peak_flops),
              1e-12);
}

}  // namespace
}  // namespace trellis
