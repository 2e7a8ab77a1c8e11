// Layout equivalence (layout_equivalence_fixture.h) for the
// mixture-of-experts family: a dense layer then three MoE layers of 4
// experts, 2 per token, with both balance losses on (and cases with a
// shared expert and with the auxiliary-loss-free bias), under dp, tp (each
// expert split as Llama's MLP), pp with every schedule, sequence
// parallelism and ZeRO 1 to 3, and context parallelism. The balance losses are
// statistics of each microbatch's tokens, which every layout forms alike, so
// every layout trains to the one-process losses and gradients, and reports the
// same routing (the fixture compares each step's balance losses and expert
// loads).
#include <vector>

#include "tests/tools/mpi/layout_equivalence_fixture.h"

namespace trellis::layout_test {
namespace {

TEST_F(LayoutEquivalenceTest, MoeLayoutsMatchOneProcess) {
  TrainOptions moe = mpitest::TinyMoe(*options_);
  Reference moe_reference = ComputeReference(moe);
  ASSERT_EQ(moe_reference.losses.size(), reference_->losses.size());
  // Three MoE layers reported, each step.
  ASSERT_EQ(moe_reference.metrics.front().expert_load.size(), 3u);
  EXPECT_GT(moe_reference.metrics.front().moe_aux_loss, 0.5);
  UseOptions use(moe, &moe_reference);
  std::vector<Layout> layouts = {L(2, 1, 1), L(1, 2, 1), L(2, 2, 2),
                                 L(1, 4, 1)};
  for (const Layout& l : BothSchedules(1, 1, 2)) layouts.push_back(l);
  layouts.push_back(L(1, 1, 2, "interleaved-1f1b", 2));
  layouts.push_back(L(1, 2, 2, "zb-h1"));
  RunAll(layouts);
  moe.sequence_parallel = true;
  RunAll({L(1, 2, 1), L(2, 2, 2, "zb-h1")});
  moe.sequence_parallel = false;
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "--zero=" << zero);
    moe.zero = zero;
    RunAll({L(2, 1, 1), L(2, 2, 2, "1f1b")});
  }
}

// A layout whose dp ranks split the experts over `ep` of them.
Layout WithEp(Layout layout, int ep) {
  layout.ep = ep;
  return layout;
}

// Context parallelism: each window split over cp ranks, whose expert
// counts the routers sum over cp so that the balance losses are the whole
// microbatch's; by ring and all-to-all, with dp, tp and pp, with full
// recompute (the counts summed again), and with expert parallelism.
TEST_F(LayoutEquivalenceTest, MoeContextParallelLayoutsMatchOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  TrainOptions moe = mpitest::TinyMoe(*options_);
  Reference moe_reference = ComputeReference(moe);
  UseOptions use(moe, &moe_reference);
  auto cp = [](Layout layout, int size, const char* comm) {
    layout.cp = size;
    layout.cp_comm = comm;
    return layout;
  };
  RunAll({cp(L(1, 1, 1), 2, "ring"), cp(L(1, 1, 1), 4, "ring"),
          cp(L(2, 1, 1), 2, "a2a"), cp(L(1, 2, 2, "1f1b"), 2, "ring")});
  moe.recompute = Recompute::kFull;
  RunAll({cp(L(1, 1, 1), 2, "ring"), cp(L(1, 1, 2, "zb-h1"), 2, "a2a")});
  moe.recompute = Recompute::kNone;
  // With expert parallelism over the same dp·cp ranks: a window's cp
  // ranks hold different experts (ep 2 on cp 2), or ep spans replicas.
  RunAll({WithEp(cp(L(1, 1, 1), 2, "ring"), 2),
          WithEp(cp(L(2, 1, 1), 2, "ring"), 4),
          WithEp(cp(L(2, 1, 1), 2, "a2a"), 2),
          WithEp(cp(L(1, 2, 2, "1f1b"), 2, "ring"), 2)});
  // ZeRO over dp·cp, the experts' over the two of four holding them.
  moe.zero = 3;
  RunAll({WithEp(cp(L(2, 1, 1), 2, "ring"), 2)});
}

// Expert parallelism: each MoE layer's 4 experts split over 2 or 4 of the
// dp ranks, which exchange their tokens' rows (all-to-all) and average
// their experts' gradients with the ranks holding the same ones; with tp,
// pp under every schedule and sequence parallelism; and under ZeRO 1 to 3,
// which shards the experts' buckets over the ranks holding them (two of
// dp4 under ep 2) and the dense ones over all of dp.
TEST_F(LayoutEquivalenceTest, MoeExpertParallelLayoutsMatchOneProcess) {
  TrainOptions moe = mpitest::TinyMoe(*options_);
  Reference moe_reference = ComputeReference(moe);
  UseOptions use(moe, &moe_reference);
  RunAll({WithEp(L(2, 1, 1), 2), WithEp(L(4, 1, 1), 4), WithEp(L(4, 1, 1), 2),
          WithEp(L(2, 2, 2, "1f1b"), 2)});
  RunAll({WithEp(L(2, 1, 2, "gpipe"), 2), WithEp(L(2, 1, 2, "zb-h1"), 2),
          WithEp(L(2, 1, 2, "interleaved-1f1b", 2), 2), WithEp(L(2, 2, 1), 2)});
  moe.sequence_parallel = true;
  RunAll({WithEp(L(2, 2, 2, "zb-h1"), 2), WithEp(L(2, 2, 1), 2)});
  moe.sequence_parallel = false;
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "--zero=" << zero);
    moe.zero = zero;
    RunAll({WithEp(L(4, 1, 1), 2), WithEp(L(2, 2, 2, "1f1b"), 2)});
  }
  // Each rank alone in holding its experts; and with sequence parallelism.
  RunAll({WithEp(L(4, 1, 1), 4)});
  moe.sequence_parallel = true;
  RunAll({WithEp(L(2, 2, 2, "zb-h1"), 2)});
}

// A shared expert beside the routed ones in every MoE layer: a SwiGLU MLP
// on every token, split over tp as the experts are, held whole by every ep
// rank (a dense parameter averaged over dp, sharded by ZeRO with them).
TEST_F(LayoutEquivalenceTest, MoeSharedExpertLayoutsMatchOneProcess) {
  TrainOptions moe = mpitest::TinyMoe(*options_);
  moe.model.moe_shared_ffn_hidden = 48;
  Reference moe_reference = ComputeReference(moe);
  UseOptions use(moe, &moe_reference);
  RunAll({L(2, 1, 1), L(1, 2, 1), L(1, 4, 1), L(2, 2, 2, "zb-h1"),
          WithEp(L(2, 1, 1), 2), WithEp(L(2, 2, 2, "1f1b"), 2)});
  moe.sequence_parallel = true;
  RunAll({L(1, 2, 1), WithEp(L(2, 2, 2, "zb-h1"), 2)});
  moe.sequence_parallel = false;
  moe.zero = 3;
  moe.recompute = Recompute::kSelective;
  RunAll({L(2, 2, 2, "1f1b"), WithEp(L(4, 1, 1), 2)});
}

// DeepSeek-V3's auxiliary-loss-free balancing: each step moves every
// router's selection bias by the step's global expert loads, which every
// layout sums alike, so every layout moves the biases alike and routes
// the next step's tokens as one process does: under dp, tp, pp, sequence
// parallelism, expert parallelism, ZeRO and (on CPU) context parallelism.
TEST_F(LayoutEquivalenceTest, MoeExpertBiasLayoutsMatchOneProcess) {
  TrainOptions moe = mpitest::TinyMoe(*options_);
  const Reference unbiased = ComputeReference(moe);
  moe.model.moe_bias_update_rate = 0.01;
  Reference moe_reference = ComputeReference(moe);
  // The bias moves the choices from the second step on.
  ASSERT_EQ(moe_reference.losses.front(), unbiased.losses.front());
  ASSERT_NE(moe_reference.losses.back(), unbiased.losses.back());
  UseOptions use(moe, &moe_reference);
  RunAll({L(2, 1, 1), L(1, 2, 1), L(2, 2, 2, "1f1b"),
          L(1, 1, 2, "interleaved-1f1b", 2), WithEp(L(2, 1, 1), 2),
          WithEp(L(4, 1, 1), 4), WithEp(L(2, 2, 2, "zb-h1"), 2)});
  moe.sequence_parallel = true;
  moe.zero = 3;
  RunAll({L(2, 2, 2, "1f1b"), WithEp(L(2, 2, 1), 2)});
  moe.sequence_parallel = false;
  moe.zero = 0;
  if (kOnGpu) return;  // --cp runs on cpu only
  Layout ring = WithEp(L(2, 1, 1), 2);
  ring.cp = 2;
  ring.cp_comm = "ring";
  RunAll({ring});
}

}  // namespace
}  // namespace trellis::layout_test
