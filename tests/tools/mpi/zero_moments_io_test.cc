// ZeRO's checkpoint I/O makes the AdamW moments whole one group at a time,
// at every level, never all of a rank's moments at once.
//
// For --zero=1, 2 and 3 under dp4, dp2·pp2 and dp2·tp2 (GPT-2, 6 layers,
// buckets of about a block), on every rank: the whole moments held at once
// through a save and through a resume stay within the memory plan's
// checkpoint term (PlanCheckpointIo) and, under levels 1 and 2, the largest
// bucket's (both kinds, float32), well under the stage's; the arena stays
// within the memory plan (or the steps' own peak, which ZeroMemoryTest
// bounds); the resumed run's next two losses equal the uninterrupted
// run's, bit for bit. Making every moment whole at once (what a resume did
// before) fails the bound.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/optim/sharded_optimizer.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using mpitest::Layout;

class ZeroMomentsIoTest
    : public mpitest::SharedTokenFileTest<ZeroMomentsIoTest> {
 public:
  static constexpr const char* kScratchTag = "zero-moments-io";
  static constexpr int64_t kTokens = 12000;
};

const ShardedOptimizer& Sharded(const Trainer& trainer) {
  return dynamic_cast<const ShardedOptimizer&>(trainer.optimizer());
}

// Bytes of both moments of the largest bucket's parameters, and of every
// parameter of the stage.
struct MomentBounds {
  size_t largest_bucket = 0;
  size_t all = 0;
};

MomentBounds BoundsOf(Trainer& trainer) {
  const GradientBuckets& buckets = trainer.buckets();
  MomentBounds bounds;
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    size_t bytes = 0;
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      bytes += 2 * 4 * static_cast<size_t>(m.param->numel());
    }
    bounds.largest_bucket = std::max(bounds.largest_bucket, bytes);
  }
  for (const Parameter* p : trainer.model().params().all()) {
    bounds.all += 2 * 4 * static_cast<size_t>(p->numel());
  }
  return bounds;
}

// The checkpoint I/O so far held at most the plan's checkpoint term of
// whole moments (not loosely: at least half of it once loaded) and, under
// levels 1 and 2, one bucket's; the arena's peak stayed within the plan or the
// `steps` before it.
void ExpectBounded(Trainer& trainer, size_t steps, bool loaded,
                   const char* when) {
  SCOPED_TRACE(when);
  const MemoryPlan& plan = trainer.memory_plan();
  const MemoryArena::Stats arena = trainer.arena().stats();
  EXPECT_LE(arena.peak_in_use, std::max<size_t>(steps, plan.total()))
      << plan.Format();
  EXPECT_EQ(arena.fallbacks, 0u);
  const MomentBounds bounds = BoundsOf(trainer);
  const size_t peak = Sharded(trainer).peak_whole_moment_bytes();
  EXPECT_GT(peak, 0u);
  EXPECT_LE(peak, plan.checkpoint) << plan.Format();
  // After a load every rank has held each group's moments whole (a save
  // makes whole only those the rank saves).
  if (loaded) {
    EXPECT_GE(2 * peak, plan.checkpoint) << plan.Format();
  }
  if (trainer.options().zero < 3) {
    EXPECT_LE(peak, bounds.largest_bucket);
  }
  // The bound means something: the term is well under the stage's moments.
  EXPECT_LT(2 * plan.checkpoint, bounds.all);
}

TEST_F(ZeroMomentsIoTest, MomentsAreWholeOneBucketAtATime) {
  if (mpitest::WorldSize() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const int zero : {1, 2, 3}) {
    for (const Layout& layout :
         {Layout{4, 1, 1}, Layout{2, 1, 2}, Layout{2, 2, 1}}) {
      const std::string name = absl::StrCat("zero-", zero, " ", layout.Name());
      SCOPED_TRACE(name);
      TrainOptions options = mpitest::TinyModelOptions(*data_);
      options.model.n_layer = 6;
      options.steps = 4;
      options.zero = zero;
      options.dp_bucket_mb = 0.01;  // several buckets per stage
      options.save_dir = absl::StrCat(*dir_, "/zero", zero, "-", layout.Name());

      // Uninterrupted: four steps.
      std::vector<double> want;
      {
        absl::StatusOr<mpitest::LayoutRun> run =
            mpitest::StartLayout(*runtime_, layout, options, MPI_COMM_WORLD);
        ASSERT_TRUE(run.ok()) << run.status();
        for (int step = 0; step < 4; ++step) {
          ASSERT_TRUE(run->trainer->Step().ok());
        }
        want = run->trainer->losses();
      }
      // Two steps and a save, then a resume and the third step.
      size_t at_save = 0, at_resume = 0;
      {
        absl::StatusOr<mpitest::LayoutRun> run =
            mpitest::StartLayout(*runtime_, layout, options, MPI_COMM_WORLD);
        ASSERT_TRUE(run.ok()) << run.status();
        for (int step = 0; step < 2; ++step) {
          ASSERT_TRUE(run->trainer->Step().ok());
        }
        const size_t steps_peak = run->trainer->arena().stats().peak_in_use;
        ASSERT_TRUE(run->trainer->Save().ok());
        ExpectBounded(*run->trainer, steps_peak, false, "after a save");
        at_save = Sharded(*run->trainer).peak_whole_moment_bytes();
      }
      TrainOptions again = options;
      again.resume = absl::StrCat(options.save_dir, "/", CheckpointName(2));
      again.save_dir = "";
      absl::StatusOr<mpitest::LayoutRun> resumed =
          mpitest::StartLayout(*runtime_, layout, again, MPI_COMM_WORLD);
      ASSERT_TRUE(resumed.ok()) << resumed.status();
      ExpectBounded(*resumed->trainer, 0, true, "after a resume");
      at_resume = Sharded(*resumed->trainer).peak_whole_moment_bytes();
      // Steps 3 and 4 as uninterrupted, bit for bit: step 3's update read
      // the loaded moments, and step 4's loss sees it.
      for (int step = 2; step < 4; ++step) {
        ASSERT_TRUE(resumed->trainer->Step().ok());
      }
      ASSERT_EQ(want.size(), 4u);
      ASSERT_EQ(resumed->trainer->losses().size(), 2u);
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(resumed->trainer->losses()[k], want[2 + k])
            << "step " << 3 + k << " after the resume";
      }

      // What a resume did before: every moment of the stage whole at once
      // (dropped again without keeping them).
      const MomentBounds bounds = BoundsOf(*resumed->trainer);
      auto& optimizer =
          const_cast<ShardedOptimizer&>(Sharded(*resumed->trainer));
      optimizer.BeginCheckpointIo(CheckpointIo::kLoad);
      optimizer.BeginCheckpointPart(CheckpointIo::kLoad,
                                    resumed->trainer->model().params().all());
      optimizer.EndCheckpointIo(CheckpointIo::kLoad);
      EXPECT_GE(optimizer.peak_whole_moment_bytes(), bounds.all)
          << "the high-water mark misses every moment made whole";
      if (mpitest::WorldRank() == 0) {
        std::printf(
            "%s: whole moments held at most (bytes): save %zu, resume %zu; "
            "largest bucket %zu; every moment at once %zu\n",
            name.c_str(), at_save, at_resume, bounds.largest_bucket,
            bounds.all);
      }
    }
  }
}

}  // namespace
}  // namespace trellis
