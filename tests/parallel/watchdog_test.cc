// The watchdog without MPI: a wait on a request that never completes passes
// its deadline (Await returns DeadlineExceeded; through a communicator the
// process ends with the report line and writes flight_0.json), the lag
// report names lagging and silent ranks, and test faults parse.
#include "parallel/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "parallel/watchdog_communicator.h"

namespace trellis {
namespace {

WatchdogOptions Options(double timeout_s, std::string dump_dir = ".") {
  WatchdogOptions options;
  options.timeout_s = timeout_s;
  options.dump_dir = std::move(dump_dir);
  return options;
}

class NeverRequest : public Request {
 public:
  void Wait() override { ADD_FAILURE() << "blocking wait on a stuck request"; }
  bool Poll() override { return false; }
};

// A group of two whose collectives never complete.
class StuckCommunicator : public Communicator {
 public:
  StuckCommunicator() : Communicator("stuck", 0, 2) {}

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor&, ReduceOp, bool) override {
    return std::make_unique<NeverRequest>();
  }
  std::unique_ptr<Request> DoReduceScatter(const Tensor&, Tensor&, ReduceOp,
                                           bool) override {
    return std::make_unique<NeverRequest>();
  }
  std::unique_ptr<Request> DoAllGather(const Tensor&, Tensor&, bool) override {
    return std::make_unique<NeverRequest>();
  }
  void DoBroadcast(Tensor&, int) override {}
  std::unique_ptr<Request> DoSend(const Tensor&, int, int) override {
    return std::make_unique<NeverRequest>();
  }
  std::unique_ptr<Request> DoRecv(Tensor&, int, int) override {
    return std::make_unique<NeverRequest>();
  }
  void DoBarrier() override {}
};

std::string ScratchDir(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("trellis_watchdog_" + name + "_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(WatchdogTest, AwaitGivesUpAtTheDeadline) {
  Watchdog watchdog(Options(0.3), MPI_COMM_NULL);
  const int64_t id = watchdog.Start("dp", CommOp::kAllReduce, -1, 64);
  NeverRequest never;
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = watchdog.Await(never, id);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("all_reduce seq 0 of group dp"),
            std::string::npos)
      << status;
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 2.0);
}

TEST(WatchdogTest, AwaitReturnsOnceTheRequestCompletes) {
  Watchdog watchdog(Options(5), MPI_COMM_NULL);
  DoneRequest done;
  EXPECT_TRUE(
      watchdog.Await(done, watchdog.Start("tp", CommOp::kSend, 1, 8)).ok());
}

TEST(WatchdogDeathTest, StuckCollectiveEndsTheProcessWithItsRecorder) {
  // "fast" style: the forked child writes into this test's `dir`.
  GTEST_FLAG_SET(death_test_style, "fast");
  const std::string dir = ScratchDir("stuck");
  EXPECT_EXIT(
      {
        Watchdog watchdog(Options(0.2, dir), MPI_COMM_NULL);
        StuckCommunicator stuck;
        WatchdogCommunicator watched(stuck, watchdog, {});
        Tensor value = Tensor::Zeros({2}, DType::kF32);
        watched.Barrier();
        watched.AllReduce(value, ReduceOp::kSum);
      },
      testing::ExitedWithCode(1),
      "watchdog: rank 0 on .* waited more than 0.2 s on all_reduce seq 1 of "
      "group stuck \\(peer -1, 8 bytes\\)");
  std::ifstream in(dir + "/flight_0.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["rank"], 0);
  EXPECT_EQ(dump["issued"]["stuck"], 2);
  ASSERT_EQ(dump["operations"].size(), 2u);
  EXPECT_EQ(dump["operations"][0]["op"], "barrier");
  EXPECT_EQ(dump["operations"][0]["state"], "done");
  EXPECT_EQ(dump["operations"][1]["op"], "all_reduce");
  EXPECT_EQ(dump["operations"][1]["state"], "waiting");
  std::filesystem::remove_all(dir);
}

// Device work stays waiting until its probe says it ran; CPU work is done
// at once.
TEST(WatchdogTest, DeviceWorkIsDoneWhenTheDeviceHasRunIt) {
  Watchdog watchdog(Options(30), MPI_COMM_NULL);
  std::atomic<bool> ran{false};
  const int64_t id = watchdog.Start("dp", CommOp::kAllReduce, -1, 64);
  watchdog.WatchDevice(id, [&] { return ran.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(watchdog.recorder().Find(id)->state, FlightRecord::State::kWaiting);
  ran = true;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (watchdog.recorder().Find(id)->state != FlightRecord::State::kDone &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(watchdog.recorder().Find(id)->state, FlightRecord::State::kDone);

  const int64_t cpu = watchdog.Start("dp", CommOp::kAllReduce, -1, 64);
  watchdog.WatchDevice(cpu, Device::Cpu());
  EXPECT_EQ(watchdog.recorder().Find(cpu)->state, FlightRecord::State::kDone);
}

TEST(WatchdogDeathTest, UnfinishedDeviceWorkEndsTheProcessWithItsRecorder) {
  GTEST_FLAG_SET(death_test_style, "fast");
  const std::string dir = ScratchDir("device");
  EXPECT_EXIT(
      {
        Watchdog watchdog(Options(0.2, dir), MPI_COMM_NULL);
        const int64_t id = watchdog.Start("pp", CommOp::kSend, 1, 4096);
        watchdog.WatchDevice(id, [] { return false; });
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      testing::ExitedWithCode(1),
      "watchdog: rank 0 on .*: the device work behind send seq 0 of group pp "
      "\\(peer 1, 4096 bytes\\) has not finished after 0\\.[2-9] s");
  std::ifstream in(dir + "/flight_0.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json dump = nlohmann::json::parse(in);
  ASSERT_EQ(dump["operations"].size(), 1u);
  EXPECT_EQ(dump["operations"][0]["op"], "send");
  EXPECT_EQ(dump["operations"][0]["state"], "waiting");
  std::filesystem::remove_all(dir);
}

TEST(WatchdogTest, SkipFaultTakesNoSequenceNumber) {
  WatchdogOptions options = Options(1);
  options.skip = *ParseCommFault("0:stuck:1");
  Watchdog watchdog(options, MPI_COMM_NULL);
  StuckCommunicator stuck;
  WatchdogCommunicator watched(stuck, watchdog, {});
  watched.Barrier();  // seq 0
  Tensor value = Tensor::Zeros({2}, DType::kF32);
  watched.AllReduce(value, ReduceOp::kSum);  // seq 1: skipped, not issued
  watched.Barrier();                         // seq 1
  EXPECT_EQ(watchdog.NextSeq("stuck"), 2);
  const std::vector<FlightRecord> records = watchdog.recorder().Snapshot();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].state, FlightRecord::State::kSkipped);
  EXPECT_EQ(records[1].seq, 1);
  EXPECT_EQ(records[2].seq, 1);
}

TEST(WatchdogTest, DescribeLagNamesLaggingAndSilentRanks) {
  std::map<int, GroupCounts> answers = {
      {1, {{"dp", 8}}}, {2, {{"dp", 7}, {"pp", 3}}}, {3, {{"pp", 9}}}};
  const std::string text = DescribeLag("dp", 7, {0, 2, 4, 6}, 0, 8, answers);
  EXPECT_NE(text.find("lagging on dp (has not issued seq 7): rank 2 "
                      "(issued 7)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("no answer from ranks 4, 5, 6, 7"), std::string::npos)
      << text;
  answers[2]["dp"] = 8;
  answers[4] = answers[5] = answers[6] = answers[7] = {{"dp", 8}};
  EXPECT_EQ(DescribeLag("dp", 7, {0, 2, 4, 6}, 0, 8, answers),
            "no answering member of dp lags");
}

TEST(WatchdogTest, ParsesFaults) {
  const absl::StatusOr<CommFault> fault = ParseCommFault("2:dp:5");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_TRUE(fault->Matches(2, "dp", 5));
  EXPECT_FALSE(fault->Matches(2, "dp", 4));
  EXPECT_FALSE(fault->Matches(1, "dp", 5));
  EXPECT_EQ(ParseCommFault("")->rank, -1);
  EXPECT_FALSE(ParseCommFault("2:5").ok());
  EXPECT_FALSE(ParseCommFault("x:dp:5").ok());
}

}  // namespace
}  // namespace trellis
