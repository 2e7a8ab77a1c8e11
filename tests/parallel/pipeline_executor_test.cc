#include "parallel/pipeline_executor.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

// Records the computes it is asked for.
class RecordingStage : public PipelineStageCallbacks {
 public:
  Tensor InputActivation(int, int) override { return Unexpected(); }
  Tensor OutputActivation(int, int) override { return Unexpected(); }
  Tensor OutputGradient(int, int) override { return Unexpected(); }
  Tensor InputGradient(int, int) override { return Unexpected(); }
  void Forward(int u, int mb) override { Log("F", u, mb); }
  void BackwardInput(int u, int mb) override { Log("B", u, mb); }
  void BackwardWeight(int u, int mb) override { Log("W", u, mb); }

  std::string log;

 private:
  Tensor Unexpected() {
    ADD_FAILURE() << "a single stage transfers nothing";
    return Tensor::Zeros({1}, DType::kF32);
  }
  void Log(const char* what, int u, int mb) {
    if (!log.empty()) log += ' ';
    log += Action{ActionType::kForward, mb, u}.ToString().replace(0, 1, what);
  }
};

TEST(PipelineExecutorTest, SingleStageRunsTheComputesInOrder) {
  ParallelContext context = ParallelContext::Single();
  PipelineExecutor executor(*context.groups().pp,
                            BuildSchedule(ScheduleKind::k1F1B, 0, 1, 3));
  std::vector<std::string> observed;
  executor.set_observer([&](const Action& a, const ActionTiming& t) {
    EXPECT_LE(t.start, t.end);
    EXPECT_EQ(t.begin_mark, -1);  // no device clock
    observed.push_back(a.ToString());
  });
  RecordingStage stage;
  const PipelineStepStats stats = executor.Run(stage);
  EXPECT_EQ(stage.log, "F0 B0 W0 F1 B1 W1 F2 B2 W2");
  EXPECT_EQ(observed.size(), 9u);
  EXPECT_EQ(observed.front(), "F0");
  EXPECT_EQ(stats.actions, 9);
  EXPECT_EQ(stats.idle_seconds, 0.0);
  EXPECT_EQ(stats.BubbleFraction(), 0.0);
  EXPECT_GE(stats.total_seconds, stats.busy_seconds);
}

// Marks are numbered in order; mark k happens at k milliseconds.
class CountingClock : public TraceClock {
 public:
  int64_t Mark() override { return next_++; }
  double Resolve(int64_t mark, std::chrono::steady_clock::time_point) override {
    return 1e3 * static_cast<double>(mark);
  }
  double Seconds(int64_t begin, int64_t end) override {
    return 1e-3 * static_cast<double>(end - begin);
  }

 private:
  int64_t next_ = 0;
};

TEST(PipelineExecutorTest, DeviceClockTimesTheComputesOnTheDevice) {
  ParallelContext context = ParallelContext::Single();
  PipelineExecutor executor(*context.groups().pp,
                            BuildSchedule(ScheduleKind::k1F1B, 0, 1, 3));
  auto clock = std::make_shared<CountingClock>();
  executor.set_device_clock(clock);
  std::vector<std::pair<int64_t, int64_t>> marks;
  executor.set_observer([&](const Action&, const ActionTiming& t) {
    marks.emplace_back(t.begin_mark, t.end_mark);
  });
  RecordingStage stage;
  PipelineStepStats stats = executor.Run(stage);
  // Mark 0 starts the step, each compute k takes marks 2k+1 and 2k+2, and
  // mark 19 ends it.
  ASSERT_EQ(marks.size(), 9u);
  for (int64_t k = 0; k < 9; ++k) {
    EXPECT_EQ(marks[k], std::make_pair(2 * k + 1, 2 * k + 2));
  }
  EXPECT_EQ(stats.device_start, 0);
  EXPECT_EQ(stats.device_end, 19);
  stats.ResolveDeviceTime(*clock);
  EXPECT_NEAR(stats.busy_seconds, 9e-3, 1e-12);
  EXPECT_NEAR(stats.total_seconds, 19e-3, 1e-12);
  EXPECT_NEAR(stats.idle_seconds, 10e-3, 1e-12);
  EXPECT_NEAR(stats.BubbleFraction(), 10.0 / 19.0, 1e-12);
  // Resolved once: a second call changes nothing.
  stats.ResolveDeviceTime(*clock);
  EXPECT_NEAR(stats.busy_seconds, 9e-3, 1e-12);
}

TEST(PipelineExecutorDeathTest, TransfersNeedAPipeline) {
  ParallelContext context = ParallelContext::Single();
  const std::vector<Action> actions = {{ActionType::kRecvActivation, 0, 0}};
  EXPECT_DEATH(PipelineExecutor(*context.groups().pp, actions),
               "in a pipeline of one stage");
}

}  // namespace
}  // namespace trellis
