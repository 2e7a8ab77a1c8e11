// Evaluation's forward-only schedules: one F per (virtual stage,
// microbatch), the transfers every chunk boundary needs, and no deadlock
// under rendezvous.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

TEST(ForwardScheduleTest, EveryShapeRunsEachForwardOnceWithItsTransfers) {
  for (int stages = 1; stages <= 4; ++stages) {
    for (int v = 1; v <= 3; ++v) {
      for (int m = 1; m <= 9; ++m) {
        SCOPED_TRACE(absl::StrCat("stages=", stages, " v=", v, " m=", m));
        const auto per_stage = BuildForwardOnlySchedules(stages, m, v);
        ASSERT_EQ(static_cast<int>(per_stage.size()), stages);
        const int chunks = stages * v;
        for (int s = 0; s < stages; ++s) {
          std::map<std::tuple<ActionType, int, int>, int> count;
          for (const Action& a : per_stage[s]) {
            EXPECT_NE(a.type, ActionType::kBackwardInput);
            EXPECT_NE(a.type, ActionType::kBackwardWeight);
            ++count[{a.type, a.virtual_stage, a.microbatch}];
          }
          for (int vs = 0; vs < v; ++vs) {
            const int chunk = vs * stages + s;
            for (int mb = 0; mb < m; ++mb) {
              EXPECT_EQ((count[{ActionType::kForward, vs, mb}]), 1);
              EXPECT_EQ((count[{ActionType::kRecvActivation, vs, mb}]),
                        chunk > 0 ? 1 : 0);
              EXPECT_EQ((count[{ActionType::kSendActivation, vs, mb}]),
                        chunk < chunks - 1 ? 1 : 0);
            }
          }
        }
        EXPECT_TRUE(SimulateSchedules(per_stage, v).ok());
        const absl::Status rendezvous =
            CheckRendezvous(per_stage, TransferGrouping::kBatched);
        EXPECT_TRUE(rendezvous.ok()) << rendezvous;
      }
    }
  }
}

TEST(ForwardScheduleTest, ReceivesPrecedeTheForwardThatNeedsThem) {
  const auto per_stage = BuildForwardOnlySchedules(3, 5, 2);
  for (int s = 0; s < 3; ++s) {
    std::map<std::pair<int, int>, bool> received;
    for (const Action& a : per_stage[s]) {
      if (a.type == ActionType::kRecvActivation) {
        received[{a.virtual_stage, a.microbatch}] = true;
      }
      if (a.type == ActionType::kForward && a.virtual_stage * 3 + s > 0) {
        EXPECT_TRUE((received[{a.virtual_stage, a.microbatch}]))
            << "stage " << s << " runs " << a.ToString() << " before its input";
      }
    }
  }
}

}  // namespace
}  // namespace trellis
