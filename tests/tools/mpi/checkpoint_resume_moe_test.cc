// Checkpoints of a mixture of experts under expert parallelism and ZeRO: a
// run on dp4 with its experts split over ep 2 and every level of ZeRO
// sharding the experts over the two ranks holding each (the dense weights
// over all four) saves at step 4 of 8. Resumed under its own layout and
// level it repeats the uninterrupted run's losses bit for bit; resumed on
// one rank (no ep, no ZeRO) and on dp2 with ep 2 under another level, it
// follows them to 1e-4 relative: the experts' weights and moments are
// stored whole whichever ranks owned their blocks. The routers' selection
// biases (--moe_bias_update_rate) move every step and resume with the run.
#include <cmath>
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

constexpr int kSaveStep = 4;
constexpr int kSteps = 8;

// A layout with its experts over `ep` of its dp ranks.
Layout WithEp(Layout layout, int ep) {
  layout.ep = ep;
  return layout;
}

class CheckpointResumeMoeTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    runtime_ = new MpiRuntime(nullptr, nullptr);
    dir_ = new std::string(mpitest::SharedScratchDir("checkpoint_resume_moe"));
    ASSERT_TRUE(mpitest::WriteSharedTokenFile(*dir_ + "/tokens.h5", 12000));
  }
  static void TearDownTestSuite() {
    mpitest::RemoveSharedScratchDir(*dir_);
    delete dir_;
    delete runtime_;
  }

  // The tiny mixture: a dense layer, then MoE layers of 4 experts, 2 per
  // token, with both balance losses.
  static TrainOptions Options() {
    TrainOptions o =
        mpitest::TinyMoe(mpitest::TinyModelOptions(*dir_ + "/tokens.h5"));
    o.steps = kSteps;
    o.dp_bucket_mb = 0.01;  // several buckets of each kind
    // The routers' selection biases move each step: the checkpoint keeps
    // them, and a resume must route as the uninterrupted run does.
    o.model.moe_bias_update_rate = 0.01;
    return o;
  }

  // Trains `layout` under ZeRO level `zero`, saving into `save_dir` (if not
  // empty) or resuming `resume` (if not empty); the losses.
  static std::vector<double> Train(const Layout& layout, int zero,
                                   const std::string& save_dir,
                                   const std::string& resume, MPI_Comm comm) {
    TrainOptions o = Options();
    o.zero = zero;
    o.save_dir = save_dir;
    o.save_every = save_dir.empty() ? 0 : kSaveStep;
    o.resume = resume;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, o, comm);
    EXPECT_TRUE(run.ok()) << layout.Name() << ": " << run.status();
    if (!run.ok()) return {};
    EXPECT_TRUE(run->trainer->Run().ok()) << layout.Name();
    return run->trainer->losses();
  }

  static MpiRuntime* runtime_;
  static std::string* dir_;
};

MpiRuntime* CheckpointResumeMoeTest::runtime_ = nullptr;
std::string* CheckpointResumeMoeTest::dir_ = nullptr;

TEST_P(CheckpointResumeMoeTest, ShardedExpertsResumeUnderOtherLayouts) {
  const int level = GetParam();
  const Layout source = WithEp(Layout{4, 1, 1}, 2);
  const std::string dir = absl::StrCat(*dir_, "/zero", level, "-dp4-ep2");
  std::vector<double> full;
  mpitest::RunSideBySide({4}, [&](int, MPI_Comm comm) {
    full = Train(source, level, dir, "", comm);
  });
  // Share the curve: rank 0 ran it.
  mpitest::ShareLosses(full, kSteps, 0);

  struct Resume {
    Layout layout;
    int zero;
  };
  const std::vector<Resume> resumes = {
      {source, level}, {WithEp(Layout{2, 1, 1}, 2), level == 1 ? 2 : 1}};
  const std::string checkpoint = dir + "/" + CheckpointName(kSaveStep);
  absl::StatusOr<TrainingState> state = ReadTrainingState(checkpoint);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->expert_bias.empty());
  auto expect_curve = [&](const Resume& r, const std::vector<double>& resumed) {
    const std::string name = absl::StrCat(r.layout.Name(), " --zero=", r.zero);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kSaveStep)) << name;
    const bool same = r.layout.world() == source.world() && r.zero == level;
    for (int i = 0; i < kSteps - kSaveStep; ++i) {
      const double want = full[kSaveStep + i];
      if (same) {
        EXPECT_EQ(resumed[i], want) << name << " step " << kSaveStep + i + 1;
      } else {
        EXPECT_NEAR(resumed[i], want, 1e-4 * std::abs(want))
            << name << " step " << kSaveStep + i + 1;
      }
    }
  };
  mpitest::RunSideBySide({4}, [&](int, MPI_Comm comm) {
    expect_curve(resumes[0], Train(resumes[0].layout, resumes[0].zero, "",
                                   checkpoint, comm));
  });
  // The other layout and one rank, side by side.
  const Resume one{Layout{1, 1, 1}, 0};
  mpitest::RunSideBySide({2, 1}, [&](int job, MPI_Comm comm) {
    const Resume& r = job == 0 ? resumes[1] : one;
    expect_curve(r, Train(r.layout, r.zero, "", checkpoint, comm));
  });
}

INSTANTIATE_TEST_SUITE_P(Levels, CheckpointResumeMoeTest,
                         ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("Zero", info.param);
                         });

}  // namespace
}  // namespace trellis
