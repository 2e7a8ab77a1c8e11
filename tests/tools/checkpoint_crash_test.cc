// Crash safety: trellis-train on two tensor-parallel ranks saves at step 2,
// then a rank is killed with SIGKILL in the middle of the step-4 save (each
// tensor write slowed by TRELLIS_CHECKPOINT_WRITE_DELAY_MS to widen the
// window). The step-2 checkpoint and `latest` stay whole: --resume=auto
// finds it, it loads into another layout (one rank), and training from it
// continues the uninterrupted run's loss curve; the next save replaces the
// half-written directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "parallel/bootstrap.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

std::vector<double> Train(TrainOptions o) {
  ParallelContext context = ParallelContext::Single();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context.groups(), context.coord());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  EXPECT_TRUE((*trainer)->Run().ok());
  return (*trainer)->losses();
}

TEST(CheckpointCrashTest, KilledRankMidSaveLeavesLatestWholeAndLoadable) {
  const std::string dir = test::ScratchDir();
  const std::string data = dir + "/tokens.h5";
  const std::string save_dir = dir + "/ckpt";
  const std::string log = dir + "/train.txt";
  test::WriteTokenFile(data, test::kByteVocab, 4000);
  TrainOptions o = test::TinyOptions(data);
  o.steps = 4;
  std::vector<std::string> argv = test::Mpirun(
      2, {"TRELLIS_CHECKPOINT_WRITE_DELAY_MS", "OPENBLAS_NUM_THREADS"});
  argv.push_back(test::Program("train"));
  for (const std::string& flag : std::vector<std::string>(
           absl::StrSplit(o.ToFlagString(), '\n', absl::SkipEmpty()))) {
    argv.push_back(flag);
  }
  for (const char* flag : {"--tp=2", "--eval_every=0", "--save_every=2"}) {
    argv.push_back(flag);
  }
  argv.push_back("--save_dir=" + save_dir);
  ::setenv("TRELLIS_CHECKPOINT_WRITE_DELAY_MS", "30", 1);
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  const pid_t mpirun = test::StartProgram(argv, log);
  ::unsetenv("TRELLIS_CHECKPOINT_WRITE_DELAY_MS");
  ASSERT_GT(mpirun, 0);

  // Wait until the step-4 save is under way, then kill rank 1.
  const fs::path partial = fs::path(save_dir) / ".step_00000004.tmp";
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(90);
  pid_t victim = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(partial / "model.h5")) {
      victim = test::FindRank(mpirun, 1);
      if (victim > 0) ::kill(victim, SIGKILL);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int exit_code = test::WaitProgram(mpirun, 60);
  ASSERT_GT(victim, 0) << "the step-4 save never started:\n"
                       << test::ReadFile(log);
  EXPECT_NE(exit_code, 0) << test::ReadFile(log);
  EXPECT_EQ(test::ReadFile(save_dir + "/latest"), "step_00000002\n");
  EXPECT_FALSE(fs::exists(fs::path(save_dir) / "step_00000004"));
  EXPECT_TRUE(fs::exists(partial));
  absl::StatusOr<std::string> resume = ResolveResume("auto", save_dir);
  ASSERT_TRUE(resume.ok()) << resume.status();
  EXPECT_EQ(*resume, save_dir + "/step_00000002");

  // The surviving checkpoint resumes under one rank on the same curve.
  const std::vector<double> uninterrupted = Train(o);
  TrainOptions r = o;
  r.save_dir = save_dir;
  r.resume = "auto";
  const std::vector<double> resumed = Train(r);
  ASSERT_EQ(uninterrupted.size(), 4u);
  ASSERT_EQ(resumed.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(resumed[i], uninterrupted[2 + i],
                1e-4 * std::abs(uninterrupted[2 + i]))
        << "step " << 3 + i;
  }
  // Its save at the end replaced the half-written directory.
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_EQ(test::ReadFile(save_dir + "/latest"), "step_00000004\n");
}

}  // namespace
}  // namespace trellis
