// A rank slowed by a test hook (a sleep in each step's data phase) is named
// on every rank, with its node, coordinates and its ratio to the median, at
// every exchange; the ranks that only wait for it are not.
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using mpitest::Layout;
using ::testing::HasSubstr;

constexpr int kSlowRank = 3;
constexpr int kSleepMs = 150;
constexpr int kEvery = 2;

TEST(StragglerMpiTest, TheSlowRankIsNamedWithItsRatio) {
  MpiRuntime runtime(nullptr, nullptr);
  // dp2·pp2 (tp 1): rank 3 is replica 1 of stage 1; its stage-0 peer waits
  // in receives and its dp peer in the gradient sync, neither of which
  // counts as compute.
  const Layout layout{2, 1, 2};
  ASSERT_EQ(mpitest::WorldSize(), layout.world());
  const std::string dir = mpitest::SharedScratchDir("straggler");
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(dir + "/tokens.h5", 12000));
  TrainOptions o = mpitest::TinyModelOptions(dir + "/tokens.h5");
  o.steps = 2 * kEvery;
  o.straggler_every = kEvery;
  setenv("TRELLIS_TEST_SLOW_RANK",
         absl::StrCat(kSlowRank, ":", kSleepMs).c_str(), 1);
  {
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(runtime, layout, o, MPI_COMM_WORLD);
    unsetenv("TRELLIS_TEST_SLOW_RANK");
    ASSERT_TRUE(run.ok()) << run.status();
    for (int step = 1; step <= o.steps; ++step) {
      absl::StatusOr<StepMetrics> m = run->trainer->Step();
      ASSERT_TRUE(m.ok()) << m.status();
      if (step % kEvery != 0) {
        EXPECT_EQ(m->straggler_rank, -1);
        EXPECT_EQ(m->straggler_ratio, 0);
        continue;
      }
      EXPECT_EQ(m->straggler_rank, kSlowRank) << "step " << step;
      // It slept kEvery × 150 ms; the tiny model computes in a few ms.
      EXPECT_GT(m->straggler_ratio, 3.0);
      EXPECT_THAT(m->straggler, HasSubstr("rank 3 ("));
      EXPECT_THAT(m->straggler, HasSubstr(runtime.hostname()));
      EXPECT_THAT(m->straggler, HasSubstr("dp 1 tp 0 pp 1"));
      EXPECT_THAT(m->straggler,
                  HasSubstr(absl::StrFormat("(%.2fx)", m->straggler_ratio)));
    }
  }
  mpitest::RemoveSharedScratchDir(dir);
}

}  // namespace
}  // namespace trellis
