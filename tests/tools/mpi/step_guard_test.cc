// A NaN gradient on one rank of a dp2·tp2·pp2 run: every rank skips that
// step, and the run goes on to the losses of the reference run below.
//
// The reference: the same data order with step 4's update left out. It is
// made without the guard: a run of 3 steps saves a checkpoint; its
// state.json is moved one global batch further in the data; a run resumed
// from it trains to step 8. So it consumes step 4's batch and applies
// nothing for it: weights, AdamW moments and step count, and the learning
// rate schedule stand where step 3 left them.
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using mpitest::Layout;

constexpr int kSteps = 8;
constexpr int kBadStep = 4;
constexpr int kBadRank = 5;

// Rank 0 moves checkpoint `dir`'s data position on by `samples`.
void SkipSamples(const std::string& dir, int64_t samples) {
  if (mpitest::WorldRank() == 0) {
    const std::string path = dir + "/state.json";
    nlohmann::json state;
    {
      std::ifstream in(path);
      in >> state;
    }
    state["samples_consumed"] =
        state["samples_consumed"].get<int64_t>() + samples;
    std::ofstream(path) << state.dump(2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The parameter: the --zero level (the hook poisons what each level's
// optimizer reads).
class StepGuardMpiTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    runtime_ = new MpiRuntime(nullptr, nullptr);
    dir_ = new std::string(mpitest::SharedScratchDir("step_guard"));
    ASSERT_TRUE(mpitest::WriteSharedTokenFile(*dir_ + "/tokens.h5", 12000));
  }
  static void TearDownTestSuite() {
    mpitest::RemoveSharedScratchDir(*dir_);
    delete dir_;
    delete runtime_;
  }
  TrainOptions Options() const {
    TrainOptions o = mpitest::TinyModelOptions(*dir_ + "/tokens.h5");
    o.steps = kSteps;
    o.zero = GetParam();
    return o;
  }

  // The reference run's losses, into `losses`: steps 1..3, then step 4's
  // batch consumed, then 4..8.
  void RunReference(const Layout& layout, std::vector<double>& losses) const {
    {
      TrainOptions o = Options();
      o.steps = kBadStep - 1;
      o.save_dir = absl::StrCat(*dir_, "/reference", GetParam());
      absl::StatusOr<mpitest::LayoutRun> run =
          mpitest::StartLayout(*runtime_, layout, o, MPI_COMM_WORLD);
      ASSERT_TRUE(run.ok()) << run.status();
      ASSERT_TRUE(run->trainer->Run().ok());
      losses = run->trainer->losses();
    }
    const std::string checkpoint = absl::StrCat(
        *dir_, "/reference", GetParam(), "/", CheckpointName(kBadStep - 1));
    SkipSamples(checkpoint, Options().global_batch_size);
    TrainOptions o = Options();
    o.resume = checkpoint;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, o, MPI_COMM_WORLD);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->trainer->Run().ok());
    const std::vector<double>& tail = run->trainer->losses();
    losses.insert(losses.end(), tail.begin(), tail.end());
  }

  static MpiRuntime* runtime_;
  static std::string* dir_;
};

MpiRuntime* StepGuardMpiTest::runtime_ = nullptr;
std::string* StepGuardMpiTest::dir_ = nullptr;

TEST_P(StepGuardMpiTest, NanOnOneRankIsSkippedEverywhereAndTrainingGoesOn) {
  const Layout layout{2, 2, 2};
  ASSERT_EQ(mpitest::WorldSize(), layout.world());
  std::vector<double> reference;
  RunReference(layout, reference);
  if (HasFatalFailure()) return;
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));

  // The guarded run: rank 5's gradient turns NaN at step 4.
  setenv("TRELLIS_TEST_INJECT_NAN",
         absl::StrCat(kBadStep, ":", kBadRank).c_str(), 1);
  absl::StatusOr<mpitest::LayoutRun> run =
      mpitest::StartLayout(*runtime_, layout, Options(), MPI_COMM_WORLD);
  unsetenv("TRELLIS_TEST_INJECT_NAN");
  ASSERT_TRUE(run.ok()) << run.status();
  Trainer& trainer = *run->trainer;
  // Bit a of `skips` is set when attempt a (0-based) was skipped.
  int skips = 0;
  std::vector<double> norms;
  for (int attempt = 0; trainer.step() < kSteps && attempt < 2 * kSteps;
       ++attempt) {
    absl::StatusOr<StepMetrics> m = trainer.Step();
    ASSERT_TRUE(m.ok()) << m.status();
    if (!m->skipped.empty()) {
      skips |= 1 << attempt;
      EXPECT_EQ(m->step, kBadStep);
      EXPECT_EQ(m->skipped_steps, 1);
      EXPECT_EQ(m->skipped, SkipReasonName(SkipReason::kNonFinite));
    }
    norms.push_back(m->grad_norm);
  }
  EXPECT_EQ(skips, 1 << (kBadStep - 1)) << "rank " << mpitest::WorldRank();
  // Every rank skipped the same attempts.
  int lowest = skips, highest = skips;
  MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lowest, highest);
  // Without ZeRO the NaN reached the norm of rank 5's model-parallel group
  // only (the other data-parallel replica's norm stayed finite): the world
  // agreement is what made that replica skip too. Under --zero=1 the norm
  // is reduced over dp as well, so every rank saw it (--zero=2 alike).
  ASSERT_EQ(norms.size(), static_cast<size_t>(kSteps + 1));
  int nan_norms = std::isnan(norms[kBadStep - 1]) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &nan_norms, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(nan_norms,
            GetParam() == 0 ? layout.tp * layout.pp : layout.world());

  // Losses: the guarded run's attempts, less the skipped one, equal the
  // reference's steps.
  const std::vector<double>& losses = trainer.losses();
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps + 1));
  for (int step = 1; step <= kSteps; ++step) {
    const int attempt = step < kBadStep ? step - 1 : step;
    EXPECT_NEAR(losses[attempt], reference[step - 1],
                1e-6 * std::abs(reference[step - 1]))
        << "step " << step;
  }
  // The NaN was in a gradient, not in the loss.
  EXPECT_TRUE(std::isfinite(losses[kBadStep - 1]));
  EXPECT_EQ(trainer.step(), kSteps);
}

INSTANTIATE_TEST_SUITE_P(ZeroLevels, StepGuardMpiTest,
                         ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("Zero", info.param);
                         });

}  // namespace
}  // namespace trellis
