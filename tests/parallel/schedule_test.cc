#include "parallel/schedule.h"

#include <algorithm>
#include <sstream>
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

// Parses ActionsString's format back: "F0 SendAct0 RecvGrad3@1".
std::vector<Action> Parse(const std::string& text) {
  std::vector<Action> actions;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const size_t digits = word.find_first_of("0123456789");
    const size_t at = word.find('@');
    Action a;
    bool known = false;
    for (ActionType type :
         {F, B, W, kSendAct, kRecvAct, kSendGrad, kRecvGrad}) {
      if (word.substr(0, digits) == ActionTypeName(type)) {
        a.type = type;
        known = true;
      }
    }
    EXPECT_TRUE(known) << word;
    a.microbatch = std::stoi(word.substr(digits, at - digits));
    if (at != std::string::npos)
      a.virtual_stage = std::stoi(word.substr(at + 1));
    actions.push_back(a);
  }
  return actions;
}

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

// Transfers sit where PlaceTransfers's rounds put them: sends right after
// their compute, receives in the round their data is sent, so stage 1 of
// 1F1B posts RecvAct1 as soon as stage 0 sends it, and SendGrad1 meets
// RecvAct2 in one batch (Megatron's send_backward_recv_forward).
TEST(ScheduleTest, OneFOneBTables) {
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 0, 2, 3)),
            "F0 SendAct0 F1 SendAct1 RecvGrad0 B0 W0 F2 SendAct2 RecvGrad1 B1 "
            "W1 RecvGrad2 B2 W2");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 1, 2, 3)),
            "RecvAct0 F0 RecvAct1 B0 SendGrad0 W0 F1 B1 SendGrad1 RecvAct2 W1 "
            "F2 B2 SendGrad2 W2");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::k1F1B, 0, 1, 2)),
            "F0 B0 W0 F1 B1 W1");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::kGPipe, 1, 3, 2)),
            "RecvAct0 F0 SendAct0 RecvAct1 F1 SendAct1 RecvGrad0 B0 SendGrad0 "
            "W0 RecvGrad1 B1 SendGrad1 W1");
  EXPECT_EQ(ActionsString(BuildSchedule(ScheduleKind::kZeroBubbleH1, 1, 2, 3)),
            "RecvAct0 F0 RecvAct1 B0 SendGrad0 F1 B1 SendGrad1 W0 RecvAct2 F2 "
            "B2 SendGrad2 W1 W2");
}

TEST(ScheduleTest, InterleavedTableNamesVirtualStages) {
  // 2 stages × 2 virtual stages: chunks 0 and 2 on stage 0, 1 and 3 on 1.
  EXPECT_EQ(
      ActionsString(BuildSchedule(ScheduleKind::kInterleaved1F1B, 1, 2, 2, 2)),
      "RecvAct0 F0 SendAct0 RecvAct1 F1 SendAct1 RecvAct0@1 F0@1 RecvAct1@1 "
      "B0@1 SendGrad0@1 W0@1 RecvGrad0 F1@1 B1@1 SendGrad1@1 W1@1 RecvGrad1 "
      "B0 SendGrad0 W0 B1 SendGrad1 W1");
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
  ASSERT_EQ(ActionsString(late[1]),
            "RecvAct0 F0 RecvAct1 B0 SendGrad0 W0 F1 B1 SendGrad1 W1");
  late[1].erase(late[1].begin() + 2);  // RecvAct1, now after F1
  late[1].insert(late[1].begin() + 6, Action{kRecvAct, 1});
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

TEST(ScheduleTest, TransferBatchesAreTheRunsBetweenComputes) {
  const std::vector<Action> stage0 =
      BuildSchedule(ScheduleKind::k1F1B, 0, 2, 3);
  // F0 SendAct0 F1 SendAct1 RecvGrad0 B0 W0 F2 SendAct2 RecvGrad1 B1 W1
  // RecvGrad2 B2 W2
  EXPECT_EQ(TransferBatches(stage0),
            (std::vector<ActionRange>{{1, 2}, {3, 5}, {8, 10}, {12, 13}}));
  EXPECT_EQ(TransferBatches(stage0, TransferGrouping::kOneByOne),
            (std::vector<ActionRange>{
                {1, 2}, {3, 4}, {4, 5}, {8, 9}, {9, 10}, {12, 13}}));
  EXPECT_TRUE(
      TransferBatches(BuildSchedule(ScheduleKind::k1F1B, 0, 1, 3)).empty());
}

// The cycle that hung NCCL when each transfer was issued alone, in the order
// the schedules used to have: stage 0 sends SendAct1 before it receives
// RecvGrad0, stage 1 sends SendGrad0 before it receives RecvAct1, and each
// send waits for its receive. Batched, the same lists complete.
TEST(ScheduleTest, RendezvousFindsTheOneByOneCycleOfOneFOneB) {
  const std::vector<std::vector<Action>> old_order = {
      Parse("F0 SendAct0 F1 SendAct1 RecvGrad0 B0 W0 F2 SendAct2 RecvGrad1 B1 "
            "W1 RecvGrad2 B2 W2"),
      Parse("RecvAct0 F0 B0 SendGrad0 W0 RecvAct1 F1 B1 SendGrad1 W1 RecvAct2 "
            "F2 B2 SendGrad2 W2")};
  EXPECT_EQ(Validate(old_order, 3, 1), "ok");
  const std::string cycle =
      "the transfers deadlock when a send waits for its receive (NCCL): "
      "stage 0 waits at SendAct1 for stage 1's RecvAct1; stage 1 waits at "
      "SendGrad0 for stage 0's RecvGrad0";
  EXPECT_EQ(CheckRendezvous(old_order, TransferGrouping::kOneByOne).message(),
            cycle);
  // Today's lists need their batches too.
  for (int m = 3; m <= 8; ++m) {
    const auto all = BuildAllSchedules(ScheduleKind::k1F1B, 2, m);
    EXPECT_EQ(Validate(all, m), "ok");
    EXPECT_THAT(
        std::string(
            CheckRendezvous(all, TransferGrouping::kOneByOne).message()),
        HasSubstr("stage 0 waits at SendAct2 for stage 1's RecvAct2; stage 1 "
                  "waits at SendGrad1 for stage 0's RecvGrad1"))
        << "m=" << m;
  }
  // With one microbatch nothing crosses.
  EXPECT_TRUE(CheckRendezvous(BuildAllSchedules(ScheduleKind::k1F1B, 2, 1),
                              TransferGrouping::kOneByOne)
                  .ok());
}

// Stage 0 sends every activation before it takes a gradient while stage 1
// runs 1F1B: no send ever blocks under MPI, but under rendezvous stage 0's
// SendAct1 and stage 1's SendGrad0 wait on each other even when batched,
// since a compute separates each from the receive the other needs.
TEST(ScheduleTest, RendezvousFindsACycleThatBatchingCannotBreak) {
  const std::vector<std::vector<Action>> all = {
      Parse("F0 SendAct0 F1 SendAct1 F2 SendAct2 RecvGrad0 B0 W0 RecvGrad1 B1 "
            "W1 RecvGrad2 B2 W2"),
      Parse("RecvAct0 F0 B0 SendGrad0 W0 RecvAct1 F1 B1 SendGrad1 W1 RecvAct2 "
            "F2 B2 SendGrad2 W2")};
  EXPECT_TRUE(ValidateSchedules(all, 3, 1, TransferModel::kEager).ok());
  EXPECT_THAT(Validate(all, 3),
              HasSubstr("stage 0 waits at SendAct1 for stage 1's RecvAct1; "
                        "stage 1 waits at SendGrad0 for stage 0's RecvGrad0"));
}

// NCCL has no tags: with two stages the activations and gradients that one
// stage sends the other share one link, and must be received in the order
// they were sent, not only in order per channel.
TEST(ScheduleTest, RendezvousPairsTransfersInOrderAcrossChannels) {
  auto all = BuildAllSchedules(ScheduleKind::kInterleaved1F1B, 2, 2, 2);
  ASSERT_EQ(ActionsString(all[0]),
            "F0 SendAct0 F1 SendAct1 RecvAct0@1 F0@1 SendAct0@1 RecvAct1@1 "
            "F1@1 SendAct1@1 RecvGrad0@1 B0@1 SendGrad0@1 W0@1 RecvGrad1@1 "
            "B1@1 SendGrad1@1 W1@1 RecvGrad0 B0 W0 RecvGrad1 B1 W1");
  ASSERT_EQ(CheckRendezvous(all, TransferGrouping::kBatched), absl::OkStatus());
  // Stage 1 takes RecvGrad0 (stage 0's SendGrad0@1) before RecvAct1@1
  // (stage 0's earlier SendAct1@1): each channel keeps its order.
  auto swapped = all;
  std::vector<Action>& s1 = swapped[1];
  auto recv_grad = std::find(s1.begin(), s1.end(), Action{kRecvGrad, 0});
  ASSERT_NE(recv_grad, s1.end());
  s1.erase(recv_grad);
  s1.insert(std::find(s1.begin(), s1.end(), Action{kRecvAct, 1, 1}),
            Action{kRecvGrad, 0});
  EXPECT_EQ(CheckRendezvous(swapped, TransferGrouping::kBatched).message(),
            "stage 1 posts RecvGrad0 as its receive 3 from stage 0, but stage "
            "0's send 3 to it is SendAct1@1 (for RecvAct1@1); without tags "
            "transfers pair up in the order posted");
}

// Every schedule, as the executor posts it (batched), passes both transfer
// models: eager (MPI) and rendezvous (NCCL).
TEST(ScheduleTest, EveryScheduleAsBatchedPassesRendezvous) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = 1; m <= 32; ++m) {
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                ScheduleKind::kZeroBubbleH1}) {
        EXPECT_EQ(Validate(BuildAllSchedules(kind, pp, m), m), "ok")
            << ScheduleKindName(kind) << " pp=" << pp << " m=" << m;
      }
      if (m % pp != 0) continue;
      for (int v = 1; v <= 4; ++v) {
        EXPECT_EQ(Validate(BuildAllSchedules(ScheduleKind::kInterleaved1F1B, pp,
                                             m, v),
                           m, v),
                  "ok")
            << "interleaved-1f1b pp=" << pp << " m=" << m << " v=" << v;
      }
    }
  }
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
