#include "parallel/pipeline_buffers.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

constexpr PipelineBuffer kInAct = PipelineBuffer::kInputActivation;
constexpr PipelineBuffer kOutAct = PipelineBuffer::kOutputActivation;
constexpr PipelineBuffer kOutGrad = PipelineBuffer::kOutputGradient;
constexpr PipelineBuffer kInGrad = PipelineBuffer::kInputGradient;
constexpr PipelineBuffer kAll[] = {kInAct, kOutAct, kOutGrad, kInGrad};

struct Case {
  ScheduleKind kind;
  int pp, m, v;
};

std::string Name(const Case& s, int stage) {
  return std::string(ScheduleKindName(s.kind)) + " pp=" + std::to_string(s.pp) +
         " m=" + std::to_string(s.m) + " v=" + std::to_string(s.v) + " stage " +
         std::to_string(stage);
}

// Every schedule kind over several (pp, m, v), interleaved ones with m a
// multiple of pp as CheckScheduleShape requires.
std::vector<Case> TrainingShapes() {
  std::vector<Case> shapes;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kZeroBubbleH1}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 5, 8, 13, 32})
        shapes.push_back({kind, pp, m, 1});
    }
  }
  for (int pp : {2, 3, 4}) {
    for (int v : {2, 3}) {
      for (int k : {1, 2, 3, 5}) {
        shapes.push_back({ScheduleKind::kInterleaved1F1B, pp, k * pp, v});
      }
    }
  }
  return shapes;
}

// The microbatches whose (kind, vstage) buffers are live at `position`,
// recomputed from the action list alone: a receive's buffer from the
// receive up to and including its F or B, a sent buffer from its F or B up
// to and including the send.
std::vector<int> LiveAt(const std::vector<Action>& actions, PipelineBuffer kind,
                        int vstage, int position) {
  auto find = [&](ActionType type, int mb) {
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.type == type && a.virtual_stage == vstage && a.microbatch == mb) {
        return static_cast<int>(i);
      }
    }
    return -1;
  };
  std::vector<int> live;
  for (const Action& a : actions) {
    if (IsCompute(a.type) || a.virtual_stage != vstage ||
        BufferOfTransfer(a.type) != kind) {
      continue;
    }
    const ActionType compute = kind == kInAct || kind == kOutAct
                                   ? ActionType::kForward
                                   : ActionType::kBackwardInput;
    const int transfer = find(a.type, a.microbatch);
    const int work = find(compute, a.microbatch);
    EXPECT_GE(work, 0) << a.ToString();
    const int begin = std::min(transfer, work), end = std::max(transfer, work);
    if (begin <= position && position <= end) live.push_back(a.microbatch);
  }
  return live;
}

// No two microbatches live at one position share a slot, and the counts
// are the most that are live at once (no slot wasted).
void ExpectSound(const std::vector<Action>& actions, int v,
                 const std::string& name) {
  const PipelineBufferSlots slots = PipelineBufferSlots::Assign(actions, v);
  for (PipelineBuffer kind : kAll) {
    for (int u = 0; u < v; ++u) {
      size_t most = 0;
      for (int p = 0; p < static_cast<int>(actions.size()); ++p) {
        const std::vector<int> live = LiveAt(actions, kind, u, p);
        most = std::max(most, live.size());
        std::map<int, int> owner;  // slot -> microbatch
        for (int mb : live) {
          const int slot = slots.slot(kind, u, mb);
          EXPECT_GE(slot, 0);
          EXPECT_LT(slot, slots.count(kind, u));
          auto [it, fresh] = owner.emplace(slot, mb);
          EXPECT_TRUE(fresh)
              << name << ": " << PipelineBufferName(kind) << " slot " << slot
              << " of virtual stage " << u << " holds microbatches "
              << it->second << " and " << mb << " at " << actions[p].ToString();
        }
      }
      EXPECT_EQ(slots.count(kind, u), static_cast<int>(most))
          << name << ": " << PipelineBufferName(kind) << " of virtual stage "
          << u;
    }
  }
}

TEST(PipelineBuffersTest, NoTwoLiveMicrobatchesShareASlotInAnySchedule) {
  for (const Case& s : TrainingShapes()) {
    for (int stage = 0; stage < s.pp; ++stage) {
      ExpectSound(BuildSchedule(s.kind, stage, s.pp, s.m, s.v), s.v,
                  Name(s, stage));
    }
  }
}

TEST(PipelineBuffersTest, NoTwoLiveMicrobatchesShareASlotWhenEvaluating) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int v : {1, 2, 3}) {
      for (int m : {1, 2, 3, 5, 8, 17}) {
        const auto all = BuildForwardOnlySchedules(pp, m, v);
        for (int stage = 0; stage < pp; ++stage) {
          ExpectSound(
              all[stage], v,
              "forward-only " + Name({ScheduleKind::k1F1B, pp, m, v}, stage));
        }
      }
    }
  }
}

// Evaluation runs fewer microbatches than a step in its last run; those
// runs must fit in the slots planned for a whole step's.
TEST(PipelineBuffersTest, ShorterForwardOnlyRunsNeedNoMoreSlots) {
  for (int pp : {2, 3, 4, 8}) {
    for (int v : {1, 2, 3}) {
      for (int m : {1, 4, 7, 16}) {
        const auto full = BuildForwardOnlySchedules(pp, m, v);
        for (int n = 1; n < m; ++n) {
          const auto part = BuildForwardOnlySchedules(pp, n, v);
          for (int stage = 0; stage < pp; ++stage) {
            const auto a = PipelineBufferSlots::Assign(full[stage], v);
            const auto b = PipelineBufferSlots::Assign(part[stage], v);
            for (PipelineBuffer kind : kAll) {
              for (int u = 0; u < v; ++u) {
                EXPECT_LE(b.count(kind, u), a.count(kind, u))
                    << "pp=" << pp << " v=" << v << " stage " << stage << " "
                    << PipelineBufferName(kind) << ": " << n << " vs " << m;
              }
            }
          }
        }
      }
    }
  }
}

int TotalSlots(ScheduleKind kind, int stage, int pp, int m, int v) {
  const auto slots =
      PipelineBufferSlots::Assign(BuildSchedule(kind, stage, pp, m, v), v);
  int total = 0;
  for (PipelineBuffer k : kAll) {
    for (int u = 0; u < v; ++u) total += slots.count(k, u);
  }
  return total;
}

// What the change is for: a stage's buffers no longer grow with the step's
// microbatches. Every schedule's needs stop growing once m passes a few
// pipeline depths; 1F1B's already at m = pp.
TEST(PipelineBuffersTest, SlotsStopGrowingWithTheMicrobatches) {
  for (int pp : {2, 4, 8}) {
    for (int stage = 0; stage < pp; ++stage) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " stage " +
                   std::to_string(stage));
      EXPECT_EQ(TotalSlots(ScheduleKind::k1F1B, stage, pp, pp, 1),
                TotalSlots(ScheduleKind::k1F1B, stage, pp, 64, 1));
      for (ScheduleKind kind :
           {ScheduleKind::kGPipe, ScheduleKind::kZeroBubbleH1}) {
        EXPECT_EQ(TotalSlots(kind, stage, pp, 4 * pp, 1),
                  TotalSlots(kind, stage, pp, 64, 1))
            << ScheduleKindName(kind);
      }
      EXPECT_EQ(
          TotalSlots(ScheduleKind::kInterleaved1F1B, stage, pp, 4 * pp, 2),
          TotalSlots(ScheduleKind::kInterleaved1F1B, stage, pp, 16 * pp, 2));
      // Far below one buffer per microbatch (4 per microbatch on a middle
      // stage before).
      EXPECT_LE(TotalSlots(ScheduleKind::k1F1B, stage, pp, 64, 1), 4 * pp);
    }
  }
}

// 1F1B receives each input just before the compute that reads it and sends
// each output right after the compute that fills it: one slot per kind.
TEST(PipelineBuffersTest, OneFOneBNeedsOneSlotPerKind) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {1, 4, 64}) {
      for (int stage = 0; stage < pp; ++stage) {
        const auto slots = PipelineBufferSlots::Assign(
            BuildSchedule(ScheduleKind::k1F1B, stage, pp, m), 1);
        for (PipelineBuffer k : kAll) {
          EXPECT_LE(slots.count(k, 0), 1)
              << "pp=" << pp << " m=" << m << " stage " << stage << " "
              << PipelineBufferName(k);
        }
      }
    }
  }
}

// A hand-checked case: stage 0 of two under 1F1B with m = 4 receives each
// gradient just before its B and sends each activation right after its F,
// so one slot of each serves all four microbatches; it receives no
// activation and sends no gradient.
TEST(PipelineBuffersTest, FirstOfTwoStagesNeedsOneSlotOfEach) {
  const std::vector<Action> actions =
      BuildSchedule(ScheduleKind::k1F1B, 0, 2, 4);
  const PipelineBufferSlots slots = PipelineBufferSlots::Assign(actions, 1);
  EXPECT_EQ(slots.CountsString(),
            "input activation: 0; output activation: 1; output gradient: 1; "
            "input gradient: 0")
      << ActionsString(actions);
  for (int mb = 0; mb < 4; ++mb) {
    EXPECT_EQ(slots.slot(kOutAct, 0, mb), 0);
    EXPECT_EQ(slots.slot(kOutGrad, 0, mb), 0);
  }
}

TEST(PipelineBuffersTest, LivesSpanTransferAndCompute) {
  // Stage 1 of 2: RecvAct0 .. F0 .. B0 .. SendGrad0.
  const std::vector<Action> actions = {{ActionType::kRecvActivation, 0, 0},
                                       {ActionType::kForward, 0, 0},
                                       {ActionType::kBackwardInput, 0, 0},
                                       {ActionType::kSendGrad, 0, 0},
                                       {ActionType::kBackwardWeight, 0, 0}};
  const std::vector<BufferLife> lives = BufferLives(actions);
  ASSERT_EQ(lives.size(), 2u);
  EXPECT_EQ(lives[0].kind, kInAct);
  EXPECT_EQ(lives[0].begin, 0);
  EXPECT_EQ(lives[0].end, 1);
  EXPECT_EQ(lives[1].kind, kInGrad);
  EXPECT_EQ(lives[1].begin, 2);
  EXPECT_EQ(lives[1].end, 3);
}

TEST(PipelineBuffersTest, WidenTakesTheLargerCounts) {
  PipelineBufferSlots a = PipelineBufferSlots::Assign(
      BuildSchedule(ScheduleKind::kGPipe, 1, 3, 8), 1);
  const PipelineBufferSlots b =
      PipelineBufferSlots::Assign(BuildForwardOnlySchedules(3, 8)[1], 1);
  PipelineBufferSlots none;
  none.Widen(b);
  for (PipelineBuffer k : kAll) EXPECT_EQ(none.count(k, 0), b.count(k, 0));
  const PipelineBufferSlots before = a;
  a.Widen(b);
  for (PipelineBuffer k : kAll) {
    EXPECT_EQ(a.count(k, 0), std::max(before.count(k, 0), b.count(k, 0)));
  }
}

}  // namespace
}  // namespace trellis
