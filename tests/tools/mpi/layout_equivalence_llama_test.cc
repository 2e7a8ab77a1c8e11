// Layout equivalence (layout_equivalence_fixture.h) for sequence
// parallelism against tensor parallelism in both families, Llama under
// every schedule and split, key/value heads replicated over tp, and
// Qwen3's attention (q/k norm, a head width of its own).
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tools/mpi/layout_equivalence_fixture.h"

namespace trellis::layout_test {
namespace {

// --sequence_parallel against the same layout without it, for both
// families: each step's loss to 1e-6 relative (kTolerance on a GPU), and,
// like every layout, the one-process losses and every gradient after step 1
// (the norms' gradients, partial sums over tp until the trainer sums them,
// included). tp 2 and 4 split the 16 rows of a microbatch into blocks of 8
// and 4; dp2·tp2·pp2 sends those blocks between stages; zb-h1 keeps the
// gathered output gradients for W; with --zero=1 the norms' gradients are
// summed over tp after the buckets' reduce-scatter (losses only there).
TEST_F(LayoutEquivalenceTest, SequenceParallelMatchesTensorParallel) {
  TrainOptions llama = Llama(*options_);
  Reference llama_reference = ComputeReference(llama);
  struct Case {
    const TrainOptions* options;
    Reference* reference;
    Layout layout;
    int zero = 0;
  };
  const std::vector<Case> cases = {
      {options_, reference_, L(1, 2, 1)},
      {options_, reference_, L(2, 2, 2)},
      {options_, reference_, L(1, 4, 1)},
      {options_, reference_, L(1, 2, 2, "zb-h1")},
      {&llama, &llama_reference, L(1, 2, 1)},
      {&llama, &llama_reference, L(2, 2, 2)},
      {&llama, &llama_reference, L(1, 2, 2, "zb-h1")},
      // The norms' gradients summed over tp after ZeRO-1's reduce-scatter.
      {options_, reference_, L(2, 2, 2), 1},
      {&llama, &llama_reference, L(2, 2, 2), 1},
  };
  std::vector<int> sizes;
  for (const Case& c : cases) sizes.push_back(c.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Case& c = cases[job];
    SCOPED_TRACE(absl::StrCat(c.layout.Name(), ", ",
                              ModelFamilyName(c.options->model.family),
                              ", --zero=", c.zero));
    std::vector<std::vector<double>> losses(2);
    for (const bool sequence_parallel : {false, true}) {
      TrainOptions options = *c.options;
      options.sequence_parallel = sequence_parallel;
      options.zero = c.zero;
      if (kOnGpu) {
        options.device = DeviceType::kCUDA;
        options.gpu_comm = DeviceTransport::kHostStaged;
      }
      absl::StatusOr<mpitest::LayoutRun> run = mpitest::StartLayout(
          *runtime_, c.layout, options, comm, PipelineP2P());
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < options.steps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[sequence_parallel].push_back(m->loss);
        // Under ZeRO-1 only the owned blocks of the buckets are current.
        if (step > 0 || !sequence_parallel || c.zero > 0) continue;
        // ExpectGradsMatch reads the case's reference.
        Reference* const saved = reference_;
        reference_ = c.reference;
        ExpectGradsMatch(run->trainer->model().params());
        reference_ = saved;
      }
    }
    const double tolerance = kOnGpu ? kTolerance : 1e-6;
    for (size_t step = 0; step < losses[1].size(); ++step) {
      EXPECT_NEAR(losses[1][step], losses[0][step],
                  tolerance * std::abs(losses[0][step]))
          << "step " << step + 1;
      const double want = c.reference->losses[step];
      EXPECT_NEAR(losses[1][step], want, kTolerance * std::abs(want))
          << "step " << step + 1;
    }
    EXPECT_LT(losses[1].back(), losses[1].front() - 0.05);
  });
}

// Llama (grouped-query attention, RoPE, RMSNorm, SwiGLU) under every
// schedule and each kind of split: heads and key/value heads over tp, the
// untied lm_head over the vocabulary, layers over pp. The tied variant
// checks that the first and last stage sum the embedding's gradients.
TEST_F(LayoutEquivalenceTest, LlamaLayoutsMatchOneProcess) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TrainOptions llama = Llama(*options_);
    llama.model.tie_embeddings = tied;
    Reference llama_reference = ComputeReference(llama);
    ASSERT_EQ(llama_reference.losses.size(), reference_->losses.size());
    UseOptions use(llama, &llama_reference);
    if (tied) {
      RunAll({L(1, 2, 2, "1f1b"), L(2, 2, 2, "zb-h1")});
    } else {
      std::vector<Layout> layouts = {L(2, 1, 1), L(1, 2, 1), L(2, 2, 2)};
      for (const Layout& l : BothSchedules(1, 1, 2)) layouts.push_back(l);
      layouts.push_back(L(1, 1, 2, "interleaved-1f1b", 2));
      layouts.push_back(L(1, 2, 2, "zb-h1"));
      RunAll(layouts);
    }
    // Parameters sharded over dp (ZeRO-3).
    llama.zero = 3;
    RunAll(
        {L(2, 1, 1), L(2, 2, 2, "zb-h1"), L(2, 1, 2, "interleaved-1f1b", 2)});
  }
}

// Key/value heads fewer than tp ranks, each replicated over tp / n_kv_heads
// ranks (Megatron's way): one head under tp 2 and under dp2·tp2·pp2, two
// heads under tp 4, and one head under dp2·tp2 with ZeRO-1. Besides the
// losses and gradients, every layout ends with bit-identical replicas
// (CheckLayout), and each logical element is held once by its owner.
TEST_F(LayoutEquivalenceTest, LlamaReplicatedKeyValueHeadsMatchOneProcess) {
  for (const int64_t kv : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("n_kv_heads=", kv));
    TrainOptions llama = Llama(*options_);
    llama.model.n_kv_heads = kv;
    Reference llama_reference = ComputeReference(llama);
    ASSERT_EQ(llama_reference.losses.size(), reference_->losses.size());
    UseOptions use(llama, &llama_reference);
    if (kv == 1) {
      RunAll({L(1, 2, 1), L(2, 2, 2, "1f1b")});
      llama.zero = 1;
      RunAll({L(2, 2, 1), L(1, 4, 1, "1f1b")});
    } else {
      RunAll({L(1, 4, 1), L(1, 4, 2, "zb-h1")});
    }
  }
}

// Qwen3's attention: a per-head RMSNorm of q and k (its weights' gradients
// partial over tp, each rank's heads; the one key head replicated over tp
// 2 gets on each rank the gradient of that rank's query heads) with heads
// 12 wide, wider than d_model / n_head; under tp, pp, every schedule,
// sequence parallelism and ZeRO.
TEST_F(LayoutEquivalenceTest, Qwen3AttentionLayoutsMatchOneProcess) {
  TrainOptions qwen = Llama(*options_);
  qwen.model.qk_norm = true;
  qwen.model.head_dim = 12;
  qwen.model.n_kv_heads = 1;
  Reference qwen_reference = ComputeReference(qwen);
  ASSERT_EQ(qwen_reference.losses.size(), reference_->losses.size());
  UseOptions use(qwen, &qwen_reference);
  RunAll({L(1, 2, 1), L(2, 2, 2, "1f1b"), L(1, 2, 2, "zb-h1"),
          L(1, 1, 2, "interleaved-1f1b", 2)});
  qwen.sequence_parallel = true;
  RunAll({L(1, 2, 1), L(2, 2, 2, "zb-h1")});
  qwen.zero = 1;
  RunAll({L(2, 2, 1)});
  qwen.sequence_parallel = false;
  qwen.zero = 3;
  RunAll({L(2, 2, 1, "1f1b")});
}

}  // namespace
}  // namespace trellis::layout_test
