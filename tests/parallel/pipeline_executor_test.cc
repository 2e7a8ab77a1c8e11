#include "parallel/pipeline_executor.h"

#include <string>
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
  executor.set_observer([&](const Action& a,
                            PipelineExecutor::Clock::time_point start,
                            PipelineExecutor::Clock::time_point end) {
    EXPECT_LE(start, end);
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

TEST(PipelineExecutorDeathTest, TransfersNeedAPipeline) {
  ParallelContext context = ParallelContext::Single();
  const std::vector<Action> actions = {{ActionType::kRecvActivation, 0, 0}};
  EXPECT_DEATH(PipelineExecutor(*context.groups().pp, actions),
               "in a pipeline of one stage");
}

}  // namespace
}  // namespace trellis
