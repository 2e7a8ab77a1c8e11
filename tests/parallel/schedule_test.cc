#include "parallel/schedule.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

constexpr ActionType F = ActionType::kForward;
constexpr ActionType B = ActionType::kBackwardInput;
constexpr ActionType W = ActionType::kBackwardWeight;
constexpr ActionType kSendAct = ActionType::kSendActivation;
constexpr ActionType kRecvAct = ActionType::kRecvActivation;
constexpr ActionType kSendGrad = ActionType::kSendGrad;
constexpr ActionType kRecvGrad = ActionType::kRecvGrad;

std::string Validate(const std::vector<std::vector<Action>>& per_stage, int m,
                     int v = 1) {
  const absl::Status status = ValidateSchedules(per_stage, m, v);
  return status.ok() ? "ok" : std::string(status.message());
}

TEST(ScheduleTest, GPipeAndOneFOneBAreValidForEveryShape) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kZeroBubbleH1}) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = 1; m <= 16; ++m) {
        EXPECT_EQ(Validate(BuildAllSchedules(kind, pp, m), m), "ok")
            << ScheduleKindName(kind) << " pp=" << pp << " m=" << m;
      }
    }
  }
}

TEST(ScheduleTest, InterleavedIsValidForEveryShape) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int v = 1; v <= (pp == 1 ? 1 : 4); ++v) {
      for (int m = pp; m <= 16; m += pp) {
        const auto all =
            BuildAllSchedules(ScheduleKind::kInterleaved1F1B, pp, m, v);
        EXPECT_EQ(Validate(all, m, v), "ok")
            << "pp=" << pp << " m=" << m << " v=" << v;
        for (int s = 0; s < pp; ++s) {
          // Megatron-LM's warm-up bound, in chunk-microbatches.
          const int bound =
              v == 1 ? pp - s : 2 * (pp - s - 1) + (v - 1) * pp + 1;
          EXPECT_LE(PeakInFlight(all[s]), std::min(v * m, bound));
        }
      }
    }
  }
}

TEST(ScheduleTest, PeakInFlight) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 16; ++m) {
      for (int s = 0; s < pp; ++s) {
        SCOPED_TRACE(testing::Message()
                     << "pp=" << pp << " m=" << m << " stage " << s);
        EXPECT_EQ(PeakInFlight(BuildSchedule(ScheduleKind::k1F1B, s, pp, m)),
                  std::min(pp - s, m));
        EXPECT_EQ(PeakInFlight(BuildSchedule(ScheduleKind::kGPipe, s, pp, m)),
                  m);
        // ZB-H1 defers W but stays within 1F1B's peak over the stages.
        EXPECT_LE(
            PeakInFlight(BuildSchedule(ScheduleKind::kZeroBubbleH1, s, pp, m)),
            std::min(pp, m));
      }
    }
  }
}

TEST(ScheduleTest, OneFOneBTables) {
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 0, 2, 3)),
            "F0 SendAct0 F1 SendAct1 RecvGrad0 B0 W0 F2 SendAct2 RecvGrad1 B1 "
            "W1 RecvGrad2 B2 W2");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 1, 2, 3)),
            "RecvAct0 F0 B0 SendGrad0 W0 RecvAct1 F1 B1 SendGrad1 W1 RecvAct2 "
            "F2 B2 SendGrad2 W2");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 0, 1, 2)),
            "F0 B0 W0 F1 B1 W1");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::kGPipe, 1, 3, 2)),
            "RecvAct0 F0 SendAct0 RecvAct1 F1 SendAct1 RecvGrad0 B0 SendGrad0 "
            "W0 RecvGrad1 B1 SendGrad1 W1");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::kZeroBubbleH1, 1, 2, 3)),
            "RecvAct0 F0 B0 SendGrad0 RecvAct1 F1 B1 SendGrad1 W0 RecvAct2 F2 "
            "B2 SendGrad2 W1 W2");
}

TEST(ScheduleTest, InterleavedTableNamesVirtualStages) {
  // 2 stages × 2 virtual stages: chunks 0 and 2 on stage 0, 1 and 3 on 1.
  EXPECT_EQ(
      ActionsString(BuildSchedule(ScheduleKind::kInterleaved1F1B, 1, 2, 2, 2)),
      "RecvAct0 F0 SendAct0 RecvAct1 F1 SendAct1 RecvAct0@1 F0@1 B0@1 "
      "SendGrad0@1 W0@1 RecvAct1@1 F1@1 B1@1 SendGrad1@1 W1@1 RecvGrad0 B0 "
      "SendGrad0 W0 RecvGrad1 B1 SendGrad1 W1");
}

// With F = B + W split evenly and free transfers, the simulated bubble of
// the built schedules is the textbook formula.
TEST(ScheduleTest, SimulatedBubbleMatchesTheory) {
  ActionCosts fused;  // W inside B, as the formulas assume
  fused.backward_input = 2.0;
  fused.backward_weight = 0.0;
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16}) {
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
        absl::StatusOr<ScheduleSimulation> sim =
            SimulateSchedules(BuildAllSchedules(kind, pp, m), 1, fused);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->BubbleFraction(), TheoreticalBubble(kind, pp, m),
                    1e-12)
            << ScheduleKindName(kind) << " pp=" << pp << " m=" << m;
      }
      for (int v : {2, 3}) {
        if (m % pp != 0 || pp == 1) continue;
        const ScheduleKind kind = ScheduleKind::kInterleaved1F1B;
        absl::StatusOr<ScheduleSimulation> sim =
            SimulateSchedules(BuildAllSchedules(kind, pp, m, v), v, fused);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->BubbleFraction(), TheoreticalBubble(kind, pp, m, v),
                    1e-12)
            << "interleaved pp=" << pp << " m=" << m << " v=" << v;
      }
      if (m >= pp) {  // ZB-H1's formula holds once the pipeline fills
        const ScheduleKind kind = ScheduleKind::kZeroBubbleH1;
        absl::StatusOr<ScheduleSimulation> sim =
            SimulateSchedules(BuildAllSchedules(kind, pp, m), 1);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->BubbleFraction(), TheoreticalBubble(kind, pp, m),
                    1e-12)
            << "zb-h1 pp=" << pp << " m=" << m;
      }
    }
  }
}

TEST(ScheduleTest, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(TheoreticalBubble(ScheduleKind::k1F1B, 4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(ScheduleKind::kGPipe, 1, 8), 0.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(ScheduleKind::kInterleaved1F1B, 4, 8, 2),
                   3.0 / 19.0);
  EXPECT_DOUBLE_EQ(TheoreticalBubble(ScheduleKind::kZeroBubbleH1, 4, 8),
                   3.0 / 27.0);
}

TEST(ScheduleTest, ValidatorRejectsMissingAndMisorderedComputes) {
  std::vector<std::vector<Action>> one = {{{F, 0}, {B, 0}}};
  EXPECT_THAT(Validate(one, 1), HasSubstr("no W for F0"));
  one = {{{F, 0}, {W, 0}, {B, 0}}};
  EXPECT_THAT(Validate(one, 1), HasSubstr("not in that order"));
  one = {{{F, 0}, {F, 0}, {B, 0}, {W, 0}}};
  EXPECT_THAT(Validate(one, 1), HasSubstr("F0 appears twice"));
  one = {{{F, 1}, {B, 1}, {W, 1}}};
  EXPECT_THAT(Validate(one, 1), HasSubstr("outside 1 microbatches"));
  one = {{{F, 0}, {kSendAct, 0}, {B, 0}, {W, 0}}};
  EXPECT_THAT(Validate(one, 1), HasSubstr("SendAct0 has no neighbour chunk"));
}

TEST(ScheduleTest, ValidatorRejectsMisplacedTransfers) {
  auto all = BuildAllSchedules(ScheduleKind::k1F1B, 2, 2);
  // Stage 1 receives F1's input after running F1.
  auto late = all;
  std::swap(late[1][5], late[1][6]);  // RecvAct1 F1 -> F1 RecvAct1
  EXPECT_THAT(Validate(late, 2),
              HasSubstr("stage 1: RecvAct1 comes after the compute"));
  auto missing = all;
  missing[0].erase(missing[0].begin() + 1);  // SendAct0
  EXPECT_THAT(Validate(missing, 2), HasSubstr("stage 0: SendAct0 is missing"));
}

TEST(ScheduleTest, ValidatorRejectsOutOfOrderReceives) {
  // Stage 1 takes microbatch 1 before 0, but stage 0 sends 0 first.
  const std::vector<std::vector<Action>> all = {{{F, 0},
                                                 {kSendAct, 0},
                                                 {F, 1},
                                                 {kSendAct, 1},
                                                 {kRecvGrad, 0},
                                                 {B, 0},
                                                 {W, 0},
                                                 {kRecvGrad, 1},
                                                 {B, 1},
                                                 {W, 1}},
                                                {{kRecvAct, 1},
                                                 {F, 1},
                                                 {B, 1},
                                                 {kSendGrad, 1},
                                                 {W, 1},
                                                 {kRecvAct, 0},
                                                 {F, 0},
                                                 {B, 0},
                                                 {kSendGrad, 0},
                                                 {W, 0}}};
  EXPECT_THAT(Validate(all, 2),
              HasSubstr("stage 1 posts RecvAct1 but stage 0 sent the data "
                        "for RecvAct0 first"));
}

TEST(ScheduleTest, ValidatorFindsDeadlock) {
  // Stage 0 waits for the gradient of microbatch 0 before sending its
  // activation: each stage waits on the other.
  const std::vector<std::vector<Action>> all = {
      {{F, 0}, {kRecvGrad, 0}, {kSendAct, 0}, {B, 0}, {W, 0}},
      {{kRecvAct, 0}, {F, 0}, {B, 0}, {kSendGrad, 0}, {W, 0}}};
  EXPECT_THAT(Validate(all, 1),
              HasSubstr("deadlock: stage 0 waits at RecvGrad0; stage 1 waits "
                        "at RecvAct0"));
}

TEST(ScheduleTest, ParsesAndChecksShapes) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
        ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1}) {
    absl::StatusOr<ScheduleKind> parsed =
        ParseScheduleKind(ScheduleKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_THAT(std::string(ParseScheduleKind("2f2b").status().message()),
              HasSubstr("unknown pipeline schedule \"2f2b\""));
  EXPECT_TRUE(CheckScheduleShape(ScheduleKind::k1F1B, 4, 3, 1).ok());
  EXPECT_THAT(
      std::string(CheckScheduleShape(ScheduleKind::k1F1B, 4, 8, 2).message()),
      HasSubstr("one virtual stage per stage, not 2"));
  EXPECT_THAT(
      std::string(CheckScheduleShape(ScheduleKind::kInterleaved1F1B, 4, 6, 2)
                      .message()),
      HasSubstr("microbatches (6) to be a multiple of the pipeline "
                "stages (4)"));
  EXPECT_FALSE(CheckScheduleShape(ScheduleKind::kGPipe, 0, 1, 1).ok());
  EXPECT_THAT(
      std::string(CheckScheduleShape(ScheduleKind::kInterleaved1F1B, 1, 4, 2)
                      .message()),
      HasSubstr("needs at least 2 pipeline stages"));
}

}  // namespace
}  // namespace trellis
