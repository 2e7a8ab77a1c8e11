// Layout equivalence (layout_equivalence_fixture.h) for GPT-2's dense
// layouts and schedules on 1 to 8 ranks, bias gradients in the GEMMs, many
// microbatches through the few buffers between stages, a blend of two
// files, and document masking and EOT loss masking.
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/mpi/layout_equivalence_fixture.h"

namespace trellis::layout_test {
namespace {

TEST_F(LayoutEquivalenceTest, OneAndTwoRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts = {L(1, 1, 1), L(2, 1, 1), L(1, 2, 1)};
  for (const Layout& l : BothSchedules(1, 1, 2)) layouts.push_back(l);
  layouts.push_back(L(1, 1, 2, "interleaved-1f1b", 2));
  layouts.push_back(L(1, 1, 2, "zb-h1"));
  RunAll(layouts);
}

TEST_F(LayoutEquivalenceTest, ChunkedHeadLayoutsMatchOneProcess) {
  // N = 16 rows per microbatch in head chunks of 5, 5, 5 and 1, the
  // vocabulary split over tp = 2 in two of them.
  ASSERT_EQ(options_->micro_batch_size * options_->model.seq_len, 16);
  RunAll({L(1, 1, 1), L(1, 2, 1), L(1, 2, 2, "zb-h1")}, 5);
}

TEST_F(LayoutEquivalenceTest, FourRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts = {L(2, 2, 1), L(1, 1, 4, "zb-h1")};
  for (const auto& [dp, tp, pp] :
       std::vector<std::array<int, 3>>{{1, 1, 4}, {1, 2, 2}, {2, 1, 2}}) {
    for (const Layout& l : BothSchedules(dp, tp, pp)) layouts.push_back(l);
  }
  RunAll(layouts);
}

TEST_F(LayoutEquivalenceTest, EightRankLayoutsMatchOneProcess) {
  std::vector<Layout> layouts;
  for (const auto& [dp, tp, pp] :
       std::vector<std::array<int, 3>>{{2, 2, 2}, {1, 4, 2}, {4, 1, 2}}) {
    for (const Layout& l : BothSchedules(dp, tp, pp)) layouts.push_back(l);
  }
  layouts.push_back(L(2, 2, 2, "interleaved-1f1b", 2));
  layouts.push_back(L(2, 2, 2, "zb-h1"));
  RunAll(layouts);
}

// --bias_grad_epilogue: the linear layers' bias gradients formed beside
// their weight gradients train to the losses of the column-sum pass (the
// one-process reference runs without it), under tp (the row-parallel
// biases replicated), sequence parallelism and the zero-bubble schedule's
// deferred weight gradients.
TEST_F(LayoutEquivalenceTest, BiasGradientsInTheGemmMatchOneProcess) {
  TrainOptions in_gemm = *options_;
  in_gemm.bias_grad_epilogue = true;
  {
    UseOptions use(in_gemm);
    RunAll({L(1, 1, 1), L(1, 2, 1), L(2, 2, 2, "zb-h1")});
  }
  in_gemm.sequence_parallel = true;
  UseOptions use(in_gemm);
  RunAll({L(1, 2, 2, "1f1b")});
}

// --gemm_autotune: GEMMs on the algorithm each shape timed fastest train to
// the losses of the one-process reference on the heuristic's first (on the
// CPU the option changes nothing; on a GPU the timing calls must leave every
// output as one call writes it), under tp, pp and the zero-bubble
// schedule's deferred weight gradients.
TEST_F(LayoutEquivalenceTest, AutotunedGemmsMatchOneProcess) {
  TrainOptions tuned = *options_;
  tuned.gemm_autotune = true;
  UseOptions use(tuned);
  RunAll({L(1, 1, 1), L(2, 2, 2, "zb-h1")});
}

// --residual_in_gemm=false: each block's output as the MLP's projection
// then a separate add trains to the losses of the fused one (the
// one-process reference), with and without tp (where the add follows the
// all-reduce either way) and with sequence parallelism.
TEST_F(LayoutEquivalenceTest, ResidualAddApartMatchesOneProcess) {
  TrainOptions apart = *options_;
  apart.residual_in_gemm = false;
  {
    UseOptions use(apart);
    RunAll({L(1, 1, 1), L(2, 2, 1)});
  }
  apart.sequence_parallel = true;
  UseOptions use(apart);
  RunAll({L(1, 2, 1)});
}

// Many microbatches through the few buffers between stages that the
// schedules need (parallel/pipeline_buffers.h), under every schedule kind
// over pp 4, then an evaluation through the forward-only schedules. Each
// message (560 rows × 32 floats, 70 KiB) is above Open MPI's eager limits, so a
// send reads its buffer after it is posted: a buffer overwritten before its
// send completed would train to other losses.
TEST_F(LayoutEquivalenceTest,
       ManyMicrobatchesThroughFewBuffersMatchOneProcess) {
  const std::string data = *dir_ + "/tokens_many.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 60000));
  TrainOptions many = *options_;
  many.data = data;
  many.model.n_layer = 8;  // 8 chunks under interleaving with v = 2
  many.model.seq_len = 112;
  many.micro_batch_size = 5;
  many.global_batch_size = 60;  // m = 12 at dp 1, 6 at dp 2
  many.steps = 6;
  // Then 67 windows evaluated: 14 microbatches at dp 1 (runs of 12 and 2)
  // and 7 at dp 2 (6 and 1).
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 67; ++i) starts.push_back(i * 797);
  Reference many_reference = ComputeReference(many, starts);
  UseOptions use(many, &many_reference);
  RunAll({L(1, 1, 4, "1f1b"), L(1, 1, 4, "gpipe"), L(1, 1, 4, "zb-h1"),
          L(1, 1, 4, "interleaved-1f1b", 2), L(2, 1, 4, "1f1b")});
}

// A blend of two files (data/blend.h): every layout draws the same windows
// from each source at each step, so it trains to the same losses.
TEST_F(LayoutEquivalenceTest, BlendLayoutsMatchOneProcess) {
  const std::string second = *dir_ + "/tokens_b.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(second, 7000));
  TrainOptions blended = *options_;
  blended.data = absl::StrCat("0.6:", options_->data, ",0.4:", second);
  Reference blend_reference = ComputeReference(blended);
  ASSERT_EQ(blend_reference.losses.size(), reference_->losses.size());
  EXPECT_NE(blend_reference.losses, reference_->losses);
  UseOptions use(blended, &blend_reference);
  RunAll({L(1, 1, 1), L(2, 1, 1), L(4, 1, 1), L(2, 2, 2)});
}

// --document_mask and --eod_mask_loss, together and each alone, for GPT-2
// and Llama: every layout masks the same attention scores and divides by
// the same count of the global batch's counted targets, so it trains to the
// same losses; middle stages (pp 4, interleaved chunks) read the document
// starts too. CPU only: the CUDA attention kernels have no document mask
// yet.
TEST_F(LayoutEquivalenceTest, DocumentMaskLayoutsMatchOneProcess) {
  if (kOnGpu) GTEST_SKIP() << "--document_mask runs on cpu only";
  struct Case {
    const char* name;
    bool llama, document_mask, eod_mask_loss;
    std::vector<Layout> layouts;
    bool sequence_parallel = false;  // the layouts' tp ranks split the rows
  };
  const std::vector<Case> cases = {
      {"gpt2, both",
       false,
       true,
       true,
       {L(2, 1, 1), L(4, 1, 1), L(1, 2, 1), L(1, 1, 4, "1f1b"),
        L(1, 1, 2, "interleaved-1f1b", 2), L(2, 2, 2, "zb-h1")}},
      {"gpt2, document mask",
       false,
       true,
       false,
       {L(1, 2, 2, "gpipe"), L(1, 1, 4, "zb-h1")}},
      {"gpt2, EOT loss mask",
       false,
       false,
       true,
       {L(4, 1, 1), L(2, 2, 2, "1f1b")}},
      {"llama, both",
       true,
       true,
       true,
       {L(2, 1, 1), L(1, 2, 1), L(1, 1, 4, "1f1b"),
        L(1, 1, 2, "interleaved-1f1b", 2), L(2, 2, 2, "zb-h1")}},
      {"gpt2, both, sequence parallel",
       false,
       true,
       true,
       {L(1, 2, 1), L(2, 2, 2, "1f1b")},
       true},
      {"llama, both, sequence parallel",
       true,
       true,
       true,
       {L(1, 2, 2, "zb-h1")},
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainOptions plain = c.llama ? Llama(*options_) : *options_;
    TrainOptions masked = plain;
    masked.document_mask = c.document_mask;
    masked.eod_mask_loss = c.eod_mask_loss;
    const Reference plain_reference =
        c.llama ? ComputeReference(plain) : *reference_;
    Reference masked_reference = ComputeReference(masked);
    // The one-process reference has no tp to split rows over.
    masked.sequence_parallel = c.sequence_parallel;
    if (masked_reference.losses.size() != reference_->losses.size()) {
      ADD_FAILURE() << "the one-process reference did not train";
      continue;
    }
    // The masks change what is trained.
    EXPECT_NE(masked_reference.losses, plain_reference.losses);
    UseOptions use(masked, &masked_reference);
    RunAll(c.layouts);
  }
}

}  // namespace
}  // namespace trellis::layout_test
