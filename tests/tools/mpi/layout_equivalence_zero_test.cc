// Layout equivalence (layout_equivalence_fixture.h) under ZeRO: each level
// against the replicated optimizer (losses, memory plans, dp traffic),
// ZeRO-3 layouts against one process, and the sums over tp that run on
// the owned blocks of the buckets.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/memory_arena.h"
#include "tests/tools/mpi/layout_equivalence_fixture.h"

namespace trellis::layout_test {
namespace {

// `base` at ZeRO level `zero` with small buckets (several per stage), on
// the GPU through host-staged transfers in the GPU build.
TrainOptions AtZeroLevel(TrainOptions base, int zero) {
  base.zero = zero;
  base.dp_bucket_mb = 0.01;
  if (kOnGpu) {
    base.device = DeviceType::kCUDA;
    base.gpu_comm = DeviceTransport::kHostStaged;
  }
  return base;
}

// What one layout's runs at --zero=0 to 3 measured, by level, and ZeRO-3's
// expected gathers.
struct ZeroLevelRuns {
  static constexpr int kLevels = 4;
  std::vector<std::vector<double>> losses =
      std::vector<std::vector<double>>(kLevels);
  std::vector<MemoryPlan> plans = std::vector<MemoryPlan>(kLevels);
  std::vector<CommStats> dp_stats = std::vector<CommStats>(kLevels);
  std::vector<MemoryArena::Stats> arenas =
      std::vector<MemoryArena::Stats>(kLevels);
  size_t peak_bound = 0, peak_gathered = 0;
  int64_t microbatches = 0, gathers = 0;
  // ZeRO-3's all-gathers per microbatch and compute pass: every gather
  // unit's buckets (their wire bytes), summed over the stage's units.
  int64_t unit_gathers = 0, unit_wire_bytes = 0, passes = 0;
  int64_t buckets3 = 0;  // ZeRO-3's buckets (one starts at each group)
};

// Records what the --zero=3 trainer (its sharded parameters set) gathered
// and what its gather units and buckets say it should have.
void RecordZeroThreeGathers(Trainer& trainer, const Layout& layout,
                            ZeroLevelRuns& r) {
  const ShardedParameters* sharded = trainer.sharded_parameters();
  r.peak_gathered = sharded->peak_gathered_bytes();
  r.gathers = sharded->gathers();
  const GradientBuckets& buckets = trainer.buckets();
  r.buckets3 = buckets.num_buckets();
  for (const auto& unit : trainer.model().GatherUnits()) {
    std::vector<int> seen;
    for (const Parameter* p : unit) {
      const int b = buckets.BucketOf(p);
      if (std::count(seen.begin(), seen.end(), b) > 0) continue;
      seen.push_back(b);
      ++r.unit_gathers;
      r.unit_wire_bytes += WireBytes(CommOp::kAllGather,
                                     buckets.bucket_elements(b) * 4, layout.dp);
    }
  }
  // F and B; W reads the weights again where it is deferred.
  r.passes = layout.schedule == "zb-h1" ? 3 : 2;
}

// Every level's losses against the replicated optimizer's, its optimizer
// state 1/dp of it and everything in the arena.
void ExpectLevelsMatchReplicated(const ZeroLevelRuns& r, const Layout& layout) {
  const std::vector<std::vector<double>>& losses = r.losses;
  // On a GPU the runs' kernels may also sum in other orders.
  const double tolerance = kOnGpu ? kTolerance : 1e-6;
  for (int zero = 1; zero < ZeroLevelRuns::kLevels; ++zero) {
    SCOPED_TRACE(absl::StrCat("--zero=", zero));
    for (size_t step = 0; step < losses[0].size(); ++step) {
      EXPECT_NEAR(losses[zero][step], losses[0][step],
                  tolerance * std::abs(losses[0][step]))
          << "step " << step + 1;
    }
    EXPECT_LT(losses[zero].back(), losses[zero].front() - 0.05);
    EXPECT_EQ(r.plans[zero].optimizer,
              (r.plans[0].optimizer + layout.dp - 1) / layout.dp);
    // Everything lies in the arena the plan sized.
    EXPECT_EQ(r.arenas[zero].fallbacks, 0u);
  }
}

// Memory: ZeRO-1 keeps whole gradient buckets; ZeRO-2 the owned 1/dp plus
// the buckets in flight, which the plan bounds (this model is too shallow
// for that to be much less than whole; see tools_zero_memory_mpi_test for
// the ratios). (On CPU ranks MPI reduce-scatters through scratch blocks:
// ZeRO-1 holds every bucket's at once, 1/dp of the gradients.) ZeRO-3:
// level 2's gradients (over buckets that break at each weight group); the
// owned 1/dp of the weights plus at most two gather units' whole values
// (here, with the embedding a large share of a shallow model, about the
// whole weights; tools_zero_memory_mpi_test checks the ratios on a deeper
// one).
void ExpectZeroMemory(const ZeroLevelRuns& r, const Layout& layout) {
  const std::vector<MemoryPlan>& plans = r.plans;
  const size_t owned = (plans[0].gradients + layout.dp - 1) / layout.dp;
  EXPECT_EQ(plans[1].gradients, plans[0].gradients + (kOnGpu ? 0 : owned));
  ASSERT_GT(plans[2].gradients, owned);
  EXPECT_GT(r.peak_bound, 0u);
  EXPECT_LE(r.peak_bound, plans[2].gradients - owned);
  EXPECT_GT(plans[3].gradients, owned);
  const size_t owned_weights = (plans[0].weights + layout.dp - 1) / layout.dp;
  ASSERT_GT(plans[3].weights, owned_weights);
  EXPECT_LE(plans[3].weights, owned_weights + plans[0].weights);
  EXPECT_GT(r.peak_gathered, 0u);
  EXPECT_LE(r.peak_gathered, plans[3].weights - owned_weights);
}

// Traffic. The replicated run all-reduces each bucket and the step's loss
// (one double); ZeRO-1 reduce-scatters and all-gathers each (padded) bucket
// once per step, and all-reduces the loss and the gradient norm: the
// all-reduce's bytes, to padding under dp elements per bucket. ZeRO-2
// reduce-scatters each bucket once per microbatch and gathers as ZeRO-1:
// m + 1 halves of an all-reduce.
void ExpectZeroOneAndTwoTraffic(const ZeroLevelRuns& r, const Layout& layout) {
  const std::vector<CommStats>& dp_stats = r.dp_stats;
  const int64_t steps = static_cast<int64_t>(r.losses[0].size());
  const int64_t scalar = WireBytes(CommOp::kAllReduce, 8, layout.dp);
  const int64_t replicated =
      dp_stats[0].WireBytes(CommOp::kAllReduce) - steps * scalar;
  const int64_t sharded = dp_stats[1].WireBytes(CommOp::kReduceScatter) +
                          dp_stats[1].WireBytes(CommOp::kAllGather);
  const int64_t buckets = dp_stats[1].Calls(CommOp::kAllGather) / steps;
  for (int zero = 1; zero < ZeroLevelRuns::kLevels; ++zero) {
    EXPECT_EQ(dp_stats[zero].WireBytes(CommOp::kAllReduce), 2 * steps * scalar);
  }
  EXPECT_GE(sharded, replicated);
  EXPECT_LE(sharded, replicated + steps * buckets * 2 * layout.dp * 4);
  EXPECT_EQ(dp_stats[2].Calls(CommOp::kReduceScatter),
            r.microbatches * dp_stats[1].Calls(CommOp::kReduceScatter));
  EXPECT_EQ(dp_stats[2].WireBytes(CommOp::kReduceScatter),
            r.microbatches * dp_stats[1].WireBytes(CommOp::kReduceScatter));
  EXPECT_EQ(dp_stats[2].WireBytes(CommOp::kAllGather),
            dp_stats[1].WireBytes(CommOp::kAllGather));
}

// ZeRO-3 reduce-scatters as ZeRO-2, gathers each unit's weights before each
// of its computes (F, B, and a deferred W) and none after the step: passes ·
// m gathers of the units per step. Where every bucket lies in one unit (no
// stage holding both ends of a tied embedding) that is passes · m times the
// all-gather of ZeRO-1 and 2.
void ExpectZeroThreeTraffic(const ZeroLevelRuns& r, const Layout& layout) {
  const std::vector<CommStats>& dp_stats = r.dp_stats;
  const int64_t steps = static_cast<int64_t>(r.losses[0].size());
  const int64_t m = r.microbatches;
  EXPECT_EQ(dp_stats[3].Calls(CommOp::kReduceScatter), steps * m * r.buckets3);
  EXPECT_NEAR(
      static_cast<double>(dp_stats[3].WireBytes(CommOp::kReduceScatter)),
      static_cast<double>(dp_stats[2].WireBytes(CommOp::kReduceScatter)),
      static_cast<double>(steps * m * r.buckets3 * layout.dp * 4));
  EXPECT_EQ(dp_stats[3].Calls(CommOp::kAllGather),
            steps * m * r.passes * r.unit_gathers);
  EXPECT_EQ(r.gathers, steps * m * r.passes * r.unit_gathers);
  EXPECT_EQ(dp_stats[3].WireBytes(CommOp::kAllGather),
            steps * m * r.passes * r.unit_wire_bytes);
  // (ZeRO-3's buckets break at each unit: padding, under dp elements of
  // 4 bytes per bucket, may differ.)
  if (layout.pp > 1) {
    EXPECT_NEAR(static_cast<double>(dp_stats[3].WireBytes(CommOp::kAllGather)),
                static_cast<double>(m * r.passes *
                                    dp_stats[2].WireBytes(CommOp::kAllGather)),
                static_cast<double>(steps * m * r.passes * r.unit_gathers *
                                    layout.dp * 4));
  }
}

// ZeRO-1, 2 and 3 (--zero=1, 2, 3) against the replicated optimizer
// (--zero=0) under the same layout, with small buckets (several per
// stage): the same losses to 1e-6 relative at every step (the elementwise
// numbers are the same; the gradient norm's summation order differs, and
// ZeRO-2 and 3 sum the microbatches' averages instead of averaging their
// sum), and each level's memory plan and dp traffic as documented. A
// global batch of 12 splits over dp 2, 3 and 4.
TEST_F(LayoutEquivalenceTest, ZeroLevelsMatchTheReplicatedOptimizer) {
  // ZB-H1 writes weight gradients in W, the others in B.
  const std::vector<Layout> layouts = {
      L(2, 1, 1), L(4, 1, 1),          L(2, 2, 2),
      L(3, 1, 2), L(2, 2, 2, "zb-h1"), L(2, 1, 2, "interleaved-1f1b", 2)};
  std::vector<int> sizes;
  for (const Layout& layout : layouts) sizes.push_back(layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Layout& layout = layouts[job];
    SCOPED_TRACE(layout.Name());
    ZeroLevelRuns r;
    for (int zero = 0; zero < ZeroLevelRuns::kLevels; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      TrainOptions options = AtZeroLevel(*options_, zero);
      options.global_batch_size = 12;
      options.steps = 8;
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, options, comm);
      ASSERT_TRUE(run.ok()) << run.status();
      // The trainer's dp group: on a GPU it routes device buffers through
      // its own transport, which the context's (host) group never sees.
      Communicator& dp = run->trainer->buckets().dp();
      dp.ResetStats();
      for (int64_t step = 0; step < options.steps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        r.losses[zero].push_back(m->loss);
      }
      r.plans[zero] = run->trainer->memory_plan();
      r.dp_stats[zero] = dp.stats();
      r.arenas[zero] = run->trainer->arena().stats();
      r.microbatches = run->trainer->options().microbatches();
      if (zero == 2) r.peak_bound = run->trainer->buckets().peak_bound_bytes();
      if (zero == 3) {
        ASSERT_NE(run->trainer->sharded_parameters(), nullptr);
        RecordZeroThreeGathers(*run->trainer, layout, r);
      }
    }
    ExpectLevelsMatchReplicated(r, layout);
    ExpectZeroMemory(r, layout);
    ExpectZeroOneAndTwoTraffic(r, layout);
    ExpectZeroThreeTraffic(r, layout);
  });
}

// ZeRO-3 (--zero=3) layouts against one process, as every layout: losses,
// gradient norms, evaluation through the gathered weights, and the arena's
// peak within the plan.
TEST_F(LayoutEquivalenceTest, ZeroThreeLayoutsMatchOneProcess) {
  TrainOptions sharded = *options_;
  sharded.zero = 3;
  sharded.dp_bucket_mb = 0.01;
  UseOptions use(sharded);
  // (dp3 is in ZeroLevelsMatchTheReplicatedOptimizer: its global batch
  // of 12 splits over 3.)
  RunAll({L(2, 1, 1), L(4, 1, 1), L(2, 2, 2), L(2, 2, 2, "zb-h1"),
          L(2, 1, 2, "interleaved-1f1b", 2)});
}

// The arena held everything (and on CPU its peak stayed within the plan,
// give or take 256 KiB).
void ExpectArenaWithinPlan(const Trainer& trainer) {
  const MemoryArena::Stats arena = trainer.arena().stats();
  EXPECT_EQ(arena.fallbacks, 0u);
  if (!kOnGpu) {
    EXPECT_LE(arena.peak_in_use, trainer.memory_plan().total() + (256 << 10))
        << trainer.memory_plan().Format();
  }
}

// The first `steps` losses and gradient norms by ZeRO level: --zero=0's
// against the reference, the other levels' against --zero=0's to 1e-6
// relative (the GPU's tolerance on a GPU), each level's loss falling.
void ExpectLossesAndNormsMatch(const std::vector<std::vector<double>>& losses,
                               const std::vector<std::vector<double>>& norms,
                               const Reference& reference, int64_t steps) {
  for (int64_t step = 0; step < steps; ++step) {
    const double want = reference.losses[step];
    EXPECT_NEAR(losses[0][step], want, kTolerance * std::abs(want))
        << "--zero=0, step " << step + 1;
    const double norm = reference.grad_norms[step];
    EXPECT_NEAR(norms[0][step], norm, kTolerance * norm)
        << "--zero=0 gradient norm, step " << step + 1;
  }
  const double tolerance = kOnGpu ? kTolerance : 1e-6;
  for (size_t zero = 1; zero < losses.size(); ++zero) {
    for (int64_t step = 0; step < steps; ++step) {
      EXPECT_NEAR(losses[zero][step], losses[0][step],
                  tolerance * std::abs(losses[0][step]))
          << "--zero=" << zero << ", step " << step + 1;
      EXPECT_NEAR(norms[zero][step], norms[0][step], tolerance * norms[0][step])
          << "--zero=" << zero << " gradient norm, step " << step + 1;
    }
    EXPECT_LT(losses[zero].back(), losses[zero].front() - 0.05);
  }
}

// The sums over tp that follow the data-parallel sync (the
// sequence-parallel norms' partial gradients, key/value heads replicated
// over sub-groups of tp) under ZeRO, where they run on the owned blocks of
// the buckets: --zero=1, 2 and 3 against --zero=0 on the same layout,
// with small buckets whose blocks cut through the norms and the
// replicated key/value columns (under --zero=3 a bucket starts at each
// weight group besides). Each step's loss and gradient norm to 1e-6
// relative (the norm counts each replicated element once, on its owner,
// from the owned blocks), --zero=0 against one process, the replicated
// key/value pieces and the tensors whole on every tp rank bit-identical at
// the end (under --zero=3, where only the owned blocks were stepped, the
// gathered weights), and the arena within the plan.
TEST_F(LayoutEquivalenceTest, ZeroLevelsSumOverTpOnTheOwnedBlocks) {
  TrainOptions kv1 = Llama(*options_);
  kv1.model.n_kv_heads = 1;  // replicated over tp 2
  const Reference llama_reference = ComputeReference(Llama(*options_));
  const Reference kv1_reference = ComputeReference(kv1);
  const TrainOptions llama = Llama(*options_);
  struct Case {
    const TrainOptions* options;
    const Reference* reference;
    Layout layout;
    bool sequence_parallel;
    const char* what;
  };
  const std::vector<Case> cases = {
      {options_, reference_, L(2, 2, 1), true, "gpt2, sequence parallel"},
      {options_, reference_, L(2, 2, 2), true, "gpt2, sequence parallel"},
      {&llama, &llama_reference, L(2, 2, 1), true, "llama, sequence parallel"},
      {&llama, &llama_reference, L(2, 2, 2, "zb-h1"), true,
       "llama, sequence parallel"},
      {&kv1, &kv1_reference, L(2, 2, 1), false, "llama, kv heads replicated"},
      {&kv1, &kv1_reference, L(2, 2, 2), false, "llama, kv heads replicated"},
      {&kv1, &kv1_reference, L(2, 2, 1), true,
       "llama, kv heads replicated, sequence parallel"},
  };
  // The first half of the reference's steps (its learning-rate schedule).
  constexpr int64_t kSteps = 10;
  std::vector<int> sizes;
  for (const Case& c : cases) sizes.push_back(c.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const Case& c = cases[job];
    SCOPED_TRACE(absl::StrCat(c.layout.Name(), ", ", c.what));
    constexpr int kLevels = 4;
    std::vector<std::vector<double>> losses(kLevels), norms(kLevels);
    for (int zero = 0; zero < kLevels; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      TrainOptions options = AtZeroLevel(*c.options, zero);
      options.sequence_parallel = c.sequence_parallel;
      absl::StatusOr<mpitest::LayoutRun> run = mpitest::StartLayout(
          *runtime_, c.layout, options, comm, PipelineP2P());
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < kSteps; ++step) {
        absl::StatusOr<StepMetrics> m = run->trainer->Step();
        ASSERT_TRUE(m.ok()) << m.status();
        losses[zero].push_back(m->loss);
        norms[zero].push_back(m->grad_norm);
      }
      // The sums' buffers too came from the arena the plan sized.
      ExpectArenaWithinPlan(*run->trainer);
      // ZeRO-3 keeps only the owned blocks: the weights are compared whole
      // (every tp replica stepped its block with the same summed gradient).
      auto* sharded =
          const_cast<ShardedParameters*>(run->trainer->sharded_parameters());
      ASSERT_EQ(sharded != nullptr, zero == 3);
      if (sharded != nullptr) sharded->GatherAll();
      const ParameterSet& params = run->trainer->model().params();
      Communicator& tp = *run->context->groups().tp;
      ExpectReplicasIdentical(params, tp);
      ExpectTpReplicatedIdentical(params, tp);
      if (sharded != nullptr) sharded->ShardAll(/*keep=*/false);
    }
    ExpectLossesAndNormsMatch(losses, norms, *c.reference, kSteps);
  });
}

}  // namespace
}  // namespace trellis::layout_test
