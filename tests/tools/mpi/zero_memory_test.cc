// Memory under each ZeRO level: the plan's categories per rank and their
// ratios to --zero=0's, and the arena's measured peak against the plan.
//
// A model deep enough (24 layers) and buckets small enough (about a quarter
// of a layer) that the buckets ZeRO-2 holds in flight are a small part of
// the gradients. For dp4 and dp2·pp2, on every rank:
//   - weights, activations, workspace and pipeline buffers do not change;
//   - level 1's optimizer state is 1/dp of level 0's; its gradients whole
//     (plus MPI's scratch blocks);
//   - level 2's gradients are the owned 1/dp plus the buckets in flight,
//     which the plan bounds (the buckets' measured high-water mark stays
//     under it, and above half of it, so the bound is not loose) and
//     which are well under the rest of the gradients;
//   - level 3's gradients are level 2's kind (owned 1/dp plus buckets in
//     flight), its weights the owned 1/dp plus two gather units (two
//     layers here), which the plan bounds (the gathered buffers' measured
//     high-water mark stays under it and above half of it) and which are
//     well under the rest of the weights;
//   - the arena's measured peak over two steps lies within 5% of the plan,
//     nothing served outside it.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using mpitest::Layout;

class ZeroMemoryTest : public mpitest::SharedTokenFileTest<ZeroMemoryTest> {
 public:
  static constexpr const char* kScratchTag = "zero-memory";
  static constexpr int64_t kTokens = 20000;

 protected:
};

struct LevelRun {
  MemoryPlan plan;
  MemoryArena::Stats arena;
  size_t peak_bound = 0;     // ZeRO-2's bucket buffers, the most at once
  size_t peak_gathered = 0;  // ZeRO-3's gathered weights, the most at once
};

TEST_F(ZeroMemoryTest, PlanShrinksByLevelAndTheArenaPeakFollowsIt) {
  if (mpitest::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const Layout& layout : {Layout{4, 1, 1}, Layout{2, 1, 2}}) {
    SCOPED_TRACE(layout.Name());
    std::vector<LevelRun> runs;
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(absl::StrCat("--zero=", zero));
      TrainOptions options = mpitest::TinyModelOptions(*data_);
      options.model.n_layer = 24;
      options.model.d_model = 64;
      options.global_batch_size = 8;
      options.steps = 2;
      options.zero = zero;
      options.dp_bucket_mb = 0.05;  // a layer is 12·64² floats, 192 KiB
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, options, MPI_COMM_WORLD);
      ASSERT_TRUE(run.ok()) << run.status();
      for (int64_t step = 0; step < options.steps; ++step) {
        ASSERT_TRUE(run->trainer->Step().ok());
      }
      const ShardedParameters* sharded = run->trainer->sharded_parameters();
      ASSERT_EQ(sharded != nullptr, zero == 3);
      runs.push_back(
          LevelRun{run->trainer->memory_plan(), run->trainer->arena().stats(),
                   run->trainer->buckets().peak_bound_bytes(),
                   sharded != nullptr ? sharded->peak_gathered_bytes() : 0});
    }
    const size_t dp = static_cast<size_t>(layout.dp);
    const MemoryPlan& zero = runs[0].plan;
    for (int level = 1; level <= 3; ++level) {
      const MemoryPlan& plan = runs[level].plan;
      if (level < 3) {
        EXPECT_EQ(plan.weights, zero.weights);
      }
      EXPECT_EQ(plan.activations, zero.activations);
      EXPECT_EQ(plan.workspace, zero.workspace);
      EXPECT_EQ(plan.pipeline, zero.pipeline);
      EXPECT_EQ(plan.optimizer, (zero.optimizer + dp - 1) / dp);
    }
    // MPI reduce-scatters in place through a scratch block: ZeRO-1 holds
    // every bucket's at once (1/dp of the gradients), ZeRO-2 those of the
    // buckets in flight.
    const size_t owned = (zero.gradients + dp - 1) / dp;
    EXPECT_EQ(runs[1].plan.gradients, zero.gradients + owned);
    ASSERT_GT(runs[2].plan.gradients, owned);
    // The plan's in-flight part (with MPI's scratch: at most two blocks of
    // 1/dp of a bucket).
    const size_t in_flight = runs[2].plan.gradients - owned;
    EXPECT_LT(in_flight, (zero.gradients - owned) / 2);
    EXPECT_LE(runs[2].peak_bound, in_flight);
    EXPECT_GT(runs[2].peak_bound, in_flight / 2);
    EXPECT_EQ(runs[0].peak_bound, 0u);
    // ZeRO-3: the gradients as level 2 (buckets breaking at each layer);
    // the weights' owned 1/dp plus the two largest gather units.
    ASSERT_GT(runs[3].plan.gradients, owned);
    EXPECT_LT(runs[3].plan.gradients - owned, (zero.gradients - owned) / 2);
    EXPECT_LE(runs[3].peak_bound, runs[3].plan.gradients - owned);
    const size_t owned_weights = (zero.weights + dp - 1) / dp;
    ASSERT_GT(runs[3].plan.weights, owned_weights);
    const size_t gathered = runs[3].plan.weights - owned_weights;
    EXPECT_LT(runs[3].plan.weights, zero.weights);
    // Two of dp4's 24 layers against the 3/4 of them sharding saves.
    if (dp == 4) {
      EXPECT_LT(gathered, (zero.weights - owned_weights) / 4);
    }
    EXPECT_LE(runs[3].peak_gathered, gathered);
    EXPECT_GT(runs[3].peak_gathered, gathered / 2);
    for (int level = 0; level <= 3; ++level) {
      SCOPED_TRACE(absl::StrCat("--zero=", level));
      const double planned = static_cast<double>(runs[level].plan.total());
      const double peak = static_cast<double>(runs[level].arena.peak_in_use);
      EXPECT_NEAR(peak, planned, 0.05 * planned) << runs[level].plan.Format();
      EXPECT_EQ(runs[level].arena.fallbacks, 0u);
    }
    EXPECT_LT(runs[3].arena.peak_in_use, runs[2].arena.peak_in_use);
    EXPECT_LT(runs[2].arena.peak_in_use, runs[1].arena.peak_in_use);
    EXPECT_LT(runs[1].arena.peak_in_use, runs[0].arena.peak_in_use);
  }
}

}  // namespace
}  // namespace trellis
