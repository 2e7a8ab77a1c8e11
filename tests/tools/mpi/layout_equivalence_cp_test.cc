// Layout equivalence (layout_equivalence_fixture.h) under context
// parallelism: each window's tokens split over cp ranks (2·cp chunks, rank
// r holding chunks r and 2·cp-1-r) with attention by a ring of key/value
// blocks or by all-to-all to a head split, alone and with dp, tp, pp (1F1B
// and interleaved), sequence parallelism, ZeRO and document masking,
// GPT-2's learned positions and Llama's rotary ones: every layout trains to
// the one-process losses and gradients.
#include <vector>

#include "tests/tools/mpi/layout_equivalence_fixture.h"

namespace trellis::layout_test {
namespace {

Layout C(int dp, int cp, int tp, int pp, const std::string& schedule = "1f1b",
         int virtual_stages = 1) {
  Layout layout = L(dp, tp, pp, schedule, virtual_stages);
  layout.cp = cp;
  return layout;
}

// The same over all-to-all.
Layout A(int dp, int cp, int tp, int pp, const std::string& schedule = "1f1b",
         int virtual_stages = 1) {
  Layout layout = C(dp, cp, tp, pp, schedule, virtual_stages);
  layout.cp_comm = "a2a";
  return layout;
}

TEST_F(LayoutEquivalenceTest, ContextParallelLayoutsMatchOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  RunAll({C(1, 2, 1, 1), C(1, 4, 1, 1), C(2, 2, 1, 1), C(2, 4, 1, 1),
          C(1, 2, 2, 2, "1f1b"), C(1, 2, 2, 2, "interleaved-1f1b", 2)});
}

// Recomputation reruns the ring (or the exchanges) in backward; zero-bubble
// schedules run W apart from B.
TEST_F(LayoutEquivalenceTest, ContextParallelRecomputeAndZeroBubbleMatch) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  for (const Recompute recompute : {Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(static_cast<int>(recompute));
    TrainOptions again = *options_;
    again.recompute = recompute;
    UseOptions use(again);
    RunAll({C(1, 2, 1, 1), A(1, 2, 1, 1), C(1, 2, 1, 2, "zb-h1")});
  }
}

// Four heads: a2a splits them over cp 2 and 4, and over cp 2 of tp 2.
TEST_F(LayoutEquivalenceTest, ContextParallelAllToAllMatchesOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  RunAll({A(1, 2, 1, 1), A(1, 4, 1, 1), A(2, 2, 1, 1), A(1, 2, 2, 2, "1f1b"),
          A(1, 2, 2, 2, "interleaved-1f1b", 2)});
}

TEST_F(LayoutEquivalenceTest, ContextParallelLlamaMatchesOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  TrainOptions llama = Llama(*options_);
  Reference reference = ComputeReference(llama);
  UseOptions use(llama, &reference);
  // Two key/value heads: a2a over cp 2 on one tp rank.
  RunAll({C(1, 2, 1, 1), C(1, 4, 1, 1), C(2, 2, 2, 1),
          C(1, 2, 2, 2, "interleaved-1f1b", 2), A(1, 2, 1, 1), A(2, 2, 1, 1)});
}

// Sequence parallelism splits each cp rank's rows over tp.
TEST_F(LayoutEquivalenceTest, ContextParallelWithSequenceParallelMatches) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    TrainOptions split = llama ? Llama(*options_) : *options_;
    Reference reference = llama ? ComputeReference(split) : *reference_;
    split.sequence_parallel = true;
    UseOptions use(split, &reference);
    RunAll({C(1, 2, 2, 1), C(1, 2, 2, 2, "1f1b")});
    if (!llama) RunAll({A(1, 2, 2, 1)});
  }
}

// ZeRO shards over the dp × cp ranks that average the gradients.
TEST_F(LayoutEquivalenceTest, ContextParallelUnderZeroMatchesOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(zero);
    TrainOptions sharded = *options_;
    sharded.zero = zero;
    sharded.dp_bucket_mb = 0.01;
    UseOptions use(sharded);
    RunAll({C(1, 2, 1, 1), C(2, 2, 1, 2, "1f1b"), A(2, 2, 1, 1)});
  }
}

// Document starts are window positions: the ring's blocks mask by them.
TEST_F(LayoutEquivalenceTest, ContextParallelDocumentMaskMatchesOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--cp runs on cpu only";
  for (const bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    TrainOptions masked = llama ? Llama(*options_) : *options_;
    masked.document_mask = true;
    masked.eod_mask_loss = true;
    Reference reference = ComputeReference(masked);
    UseOptions use(masked, &reference);
    RunAll({C(1, 2, 1, 1), C(1, 4, 1, 1), C(2, 2, 2, 1), A(1, 2, 1, 1)});
  }
}

}  // namespace
}  // namespace trellis::layout_test
