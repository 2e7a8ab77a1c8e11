// The communication watchdog on whole jobs, started under mpirun by the test
// (a watchdog that fires ends the job, which a test inside the job could not
// report):
//   - a 4-rank trellis-train (pp 2 × dp 2) in which rank 2 is stopped with
//     SIGSTOP mid-run ends within --comm_timeout_s + 10 s, nonzero, and
//     every report line names rank 2;
//   - a rank that skips a collective is named as the one whose sequence
//     number lags, by the ranks that time out waiting on it.
// Each leaves flight_<rank>.json files behind and no process running.
// Beside them, a job whose stop signal reaches one rank only: every rank
// stops together, and rank 0 says that another rank had the signal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kTimeoutS = 5;

// The lines of `log` that start with "watchdog: ".
std::vector<std::string> ReportLines(const std::string& log) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StartsWith(line, "watchdog: ")) lines.emplace_back(line);
  }
  return lines;
}

// Every flight_<rank>.json in `dir`, checked to hold a recorder.
int CountDumps(const std::string& dir) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "flight_") || !absl::EndsWith(name, ".json")) {
      continue;
    }
    std::ifstream in(entry.path());
    const nlohmann::json dump = nlohmann::json::parse(in, nullptr, false);
    EXPECT_FALSE(dump.is_discarded()) << name;
    if (dump.is_discarded()) continue;
    EXPECT_TRUE(dump["operations"].is_array()) << name;
    EXPECT_FALSE(dump["operations"].empty()) << name;
    EXPECT_LE(dump["operations"].size(), 64u) << name;
    ++count;
  }
  return count;
}

// Whether process `pid` has ended (no such process, or a zombie).
bool Gone(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string id, comm, state;
  if (!(stat >> id >> comm >> state)) return true;
  return state == "Z" || state == "X";
}

// Kills what is left of the job started as `mpirun` (its process group),
// including a stopped rank.
void KillJob(pid_t mpirun, pid_t stopped) {
  if (stopped > 0) {
    ::kill(stopped, SIGKILL);
    ::kill(stopped, SIGCONT);
  }
  if (mpirun > 0) ::kill(-mpirun, SIGKILL);
}

// A tiny trellis-train job under mpirun, logging every step to
// dir/metrics.jsonl and its output to dir/train.txt.
struct TinyJob {
  pid_t mpirun = -1;
  std::string log;
};

// Starts `ranks` ranks of a long run of `layout` (which sets dp, tp, pp and
// what else the test needs on the tiny options).
TinyJob StartTinyJob(const std::string& dir, int ranks,
                     const std::function<void(TrainOptions&)>& layout) {
  const std::string data = dir + "/tokens.h5";
  test::WriteTokenFile(data, test::kByteVocab, 4000);
  TrainOptions o = test::TinyOptions(data);
  o.steps = 1000000;
  o.log_every = 1;
  o.eval_every = 0;
  o.metrics_file = dir + "/metrics.jsonl";
  o.save_dir = dir + "/run";
  layout(o);
  std::vector<std::string> argv = test::Mpirun(ranks, {"OPENBLAS_NUM_THREADS"});
  argv.push_back(test::Program("train"));
  for (const std::string& flag : std::vector<std::string>(
           absl::StrSplit(o.ToFlagString(), '\n', absl::SkipEmpty()))) {
    argv.push_back(flag);
  }
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  TinyJob job;
  job.log = dir + "/train.txt";
  job.mpirun = test::StartProgram(argv, job.log);
  return job;
}

// Once `steps` steps are logged, the pid of rank `rank`; -1 when that does
// not come within 120 s.
pid_t RankAfterSteps(const TinyJob& job, const std::string& dir, int steps,
                     int rank) {
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < give_up) {
    const std::string lines = test::ReadFile(dir + "/metrics.jsonl");
    if (std::count(lines.begin(), lines.end(), '\n') >= steps) {
      return test::FindRank(job.mpirun, rank);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

TEST(WatchdogJobsTest, StoppedRankEndsTheJobNamingIt) {
  const std::string dir = test::ScratchDir();
  const TinyJob job = StartTinyJob(dir, 4, [](TrainOptions& o) {
    o.pp = 2;
    o.comm_timeout_s = kTimeoutS;
  });
  const pid_t mpirun = job.mpirun;
  const std::string& log = job.log;
  const std::string save_dir = dir + "/run";
  ASSERT_GT(mpirun, 0);
  // Let a few steps run, then stop rank 2.
  const pid_t victim = RankAfterSteps(job, dir, 3, 2);
  if (victim <= 0) {
    KillJob(mpirun, -1);
    FAIL() << "training did not start, or rank 2 was not found:\n"
           << test::ReadFile(log);
  }
  ASSERT_EQ(::kill(victim, SIGSTOP), 0);
  const Clock::time_point stopped = Clock::now();
  const int exit_code = test::WaitProgram(mpirun, kTimeoutS + 60);
  const double seconds =
      std::chrono::duration<double>(Clock::now() - stopped).count();
  // The job's processes are all gone with it, the stopped rank too.
  bool victim_gone = false;
  for (int i = 0; i < 100 && !victim_gone; ++i) {
    victim_gone = Gone(victim);
    if (!victim_gone)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(victim_gone) << "rank 2 (pid " << victim << ") outlived its job";
  KillJob(mpirun, victim);

  const std::string output = test::ReadFile(log);
  EXPECT_NE(exit_code, 0) << output;
  EXPECT_NE(exit_code, -1) << "the job hung:\n" << output;
  EXPECT_LT(seconds, kTimeoutS + 10) << output;
  // Open MPI continues stopped ranks (SIGCONT) while it ends the job, so
  // rank 2 may get to report too; the others' reports must name it.
  std::vector<std::string> reports;
  for (const std::string& line : ReportLines(output)) {
    if (!absl::StartsWith(line, "watchdog: rank 2 ")) reports.push_back(line);
  }
  ASSERT_FALSE(reports.empty()) << output;
  for (const std::string& line : reports) {
    EXPECT_THAT(line, testing::ContainsRegex("waited more than 5 s on "));
    EXPECT_THAT(line, testing::ContainsRegex("rank 2[ ,)]|ranks (.*, )?2[ ,]"))
        << "does not name the stopped rank: " << line;
  }
  EXPECT_GE(CountDumps(save_dir), 1) << output;
}

TEST(StopSignalJobTest, ASignalToOneRankStopsTheJobAndRankZeroSaysWhere) {
  const std::string dir = test::ScratchDir();
  const TinyJob job = StartTinyJob(dir, 2, [](TrainOptions& o) { o.dp = 2; });
  const pid_t mpirun = job.mpirun;
  const std::string& log = job.log;
  ASSERT_GT(mpirun, 0);
  const pid_t rank1 = RankAfterSteps(job, dir, 2, 1);
  if (rank1 <= 0) {
    KillJob(mpirun, -1);
    FAIL() << "training did not start, or rank 1 was not found:\n"
           << test::ReadFile(log);
  }
  ASSERT_EQ(::kill(rank1, SIGUSR1), 0);
  const int exit_code = test::WaitProgram(mpirun, 120);
  const std::string output = test::ReadFile(log);
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_THAT(output, testing::ContainsRegex(
                          "trellis-train: stopped by a stop signal on another "
                          "rank after step [0-9]+\n"))
      << output;
  EXPECT_THAT(output, testing::Not(testing::HasSubstr("signal 0")));
}

// The fault program's six operations on world are all-reduces or barriers
// (the parameter): a barrier waits under the deadline as the others do.
class WatchdogSkipTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WatchdogSkipTest, SkippedCollectiveNamesTheLaggingRank) {
  const std::string operation = GetParam();
  const std::string dir = test::ScratchDir();
  const std::string log = dir + "/job.txt";
  std::vector<std::string> argv =
      test::Mpirun(4, {"TRELLIS_TEST_SKIP_COLLECTIVE"});
  argv.push_back(TRELLIS_WATCHDOG_FAULT_PROGRAM);
  argv.push_back(dir);
  argv.push_back(std::to_string(kTimeoutS));
  argv.push_back(operation);
  ::setenv("TRELLIS_TEST_SKIP_COLLECTIVE", "2:world:3", 1);
  const pid_t mpirun = test::StartProgram(argv, log);
  ::unsetenv("TRELLIS_TEST_SKIP_COLLECTIVE");
  ASSERT_GT(mpirun, 0);
  const Clock::time_point start = Clock::now();
  const int exit_code = test::WaitProgram(mpirun, kTimeoutS + 60);
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  KillJob(mpirun, -1);

  const std::string output = test::ReadFile(log);
  EXPECT_NE(exit_code, 0) << output;
  EXPECT_NE(exit_code, -1) << "the job hung:\n" << output;
  EXPECT_LT(seconds, kTimeoutS + 30) << output;
  const std::vector<std::string> reports = ReportLines(output);
  ASSERT_FALSE(reports.empty()) << output;
  for (const std::string& line : reports) {
    // The others wait on world's seq 5, which rank 2 (5 issued) never posts.
    EXPECT_THAT(line, testing::ContainsRegex(absl::StrCat(
                          operation,
                          " seq 5 of group world .*lagging on world "
                          "\\(has not issued seq 5\\): rank 2 \\(issued 5\\)")))
        << line;
    EXPECT_THAT(line, testing::Not(testing::HasSubstr("no answer")))
        << "rank 2 waits in a watched call and should answer: " << line;
  }
  // The ranks that timed out and rank 2, which answered their notice.
  EXPECT_GE(CountDumps(dir), 2) << output;
  std::ifstream in(dir + "/flight_2.json");
  ASSERT_TRUE(in.good()) << output;
  const nlohmann::json dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["issued"]["world"], 5);
  EXPECT_EQ(dump["operations"][3]["state"], "skipped");
}

INSTANTIATE_TEST_SUITE_P(Operations, WatchdogSkipTest,
                         ::testing::Values("all_reduce", "barrier"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param;
                         });

TEST(WatchdogJobsTest, FaultProgramCompletesWithoutAFault) {
  const std::string dir = test::ScratchDir();
  const std::string log = dir + "/job.txt";
  std::vector<std::string> argv = test::Mpirun(4);
  argv.push_back(TRELLIS_WATCHDOG_FAULT_PROGRAM);
  argv.push_back(dir);
  argv.push_back(std::to_string(kTimeoutS));
  const pid_t mpirun = test::StartProgram(argv, log);
  ASSERT_GT(mpirun, 0);
  const int exit_code = test::WaitProgram(mpirun, 120);
  KillJob(mpirun, -1);
  EXPECT_EQ(exit_code, 0) << test::ReadFile(log);
  EXPECT_TRUE(ReportLines(test::ReadFile(log)).empty());
}

}  // namespace
}  // namespace trellis
