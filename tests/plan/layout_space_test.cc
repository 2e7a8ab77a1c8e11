// The enumeration holds exactly the layouts the trainer's validator
// accepts: none it refuses, and every one it accepts within the limits.
#include "tools/plan/layout_space.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "parallel/schedule.h"

namespace trellis {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.model.n_layer = 4;
  o.model.n_head = 6;
  o.model.d_model = 96;
  o.model.seq_len = 32;
  o.model.vocab_size = 257;
  o.global_batch_size = 8;
  return o;
}

TEST(LayoutSpaceTest, EveryLayoutPassesTheValidator) {
  const std::vector<TrainOptions> layouts =
      EnumerateLayouts(Small(), 4, SearchLimits{});
  ASSERT_FALSE(layouts.empty());
  for (const TrainOptions& o : layouts) {
    TrainOptions again = o;
    EXPECT_TRUE(ValidateLayout(again, 4).ok()) << LayoutName(o);
    EXPECT_EQ(o.dp * o.cp * o.tp * o.pp, 4);
    // 6 heads do not split over 4 tensor-parallel ranks.
    EXPECT_NE(o.tp, 4) << LayoutName(o);
  }
}

TEST(LayoutSpaceTest, RefusedLayoutsNeverAppear) {
  TrainOptions refused = Small();
  refused.tp = 4;
  refused.dp = 1;
  EXPECT_FALSE(ValidateLayout(refused, 4).ok());
  refused = Small();
  refused.pp = 4;
  refused.dp = 1;
  refused.schedule = ScheduleKind::kInterleaved1F1B;
  refused.virtual_stages = 2;  // 8 chunks for 4 layers
  EXPECT_FALSE(ValidateLayout(refused, 4).ok());
  std::set<std::string> names;
  for (const TrainOptions& o : EnumerateLayouts(Small(), 4, SearchLimits{})) {
    names.insert(LayoutName(o));
  }
  EXPECT_EQ(names.count("dp1.tp4.pp1/1f1b/v1/mbs8/z0/none"), 0u);
  EXPECT_EQ(names.count("dp1.tp1.pp4/interleaved-1f1b/v2/mbs1/z0/none"), 0u);
  EXPECT_EQ(names.count("dp2.tp2.pp1/1f1b/v1/mbs4/z1/full"), 1u);
  EXPECT_EQ(names.count("dp1.tp1.pp4/zb-h1/v1/mbs2/z0/selective"), 1u);
  EXPECT_EQ(names.count("dp1.tp2.pp2/interleaved-1f1b/v2/mbs4/z0/none"), 1u);
}

// ZeRO-2, ZeRO-3 and sequence parallelism are searched; which of their
// combinations survive is the validator's call, not the search's.
TEST(LayoutSpaceTest, SearchesZeroTwoAndSequenceParallelism) {
  std::set<std::string> names;
  int zero2 = 0, zero3 = 0, sp = 0;
  for (const TrainOptions& o : EnumerateLayouts(Small(), 4, SearchLimits{})) {
    names.insert(LayoutName(o));
    zero2 += o.zero == 2;
    zero3 += o.zero == 3;
    sp += o.sequence_parallel;
    EXPECT_TRUE(!o.sequence_parallel || o.tp > 1) << LayoutName(o);
  }
  EXPECT_GT(zero2, 0);
  EXPECT_GT(zero3, 0);
  EXPECT_EQ(names.count("dp2.tp2.pp1/1f1b/v1/mbs4/z3/none"), 1u);
  EXPECT_EQ(names.count("dp2.tp1.pp2/zb-h1/v1/mbs2/z3/full"), 1u);
  EXPECT_GT(sp, 0);
  EXPECT_EQ(names.count("dp2.tp2.pp1/1f1b/v1/mbs4/z2/none"), 1u);
  EXPECT_EQ(names.count("dp2.tp2.pp1/1f1b/v1/mbs4/z1/none/sp"), 1u);
  EXPECT_EQ(names.count("dp1.tp2.pp2/zb-h1/v1/mbs2/z0/full/sp"), 1u);
  // Today's refusals, asked of the validator (they may be lifted).
  TrainOptions both = Small();
  both.dp = 2;
  both.tp = 2;
  both.micro_batch_size = 4;
  both.zero = 2;
  both.sequence_parallel = true;
  TrainOptions probe = both;
  EXPECT_EQ(names.count(LayoutName(both)),
            ValidateLayout(probe, 4).ok() ? 1u : 0u);
  both.zero = 3;
  probe = both;
  EXPECT_EQ(names.count(LayoutName(both)),
            ValidateLayout(probe, 4).ok() ? 1u : 0u);
}

// Virtual stages stop at a layer per chunk, whatever the limit.
TEST(LayoutSpaceTest, VirtualStagesStopAtALayerPerChunk) {
  SearchLimits limits;
  limits.max_virtual_stages = 1000000000;
  const std::vector<TrainOptions> layouts =
      EnumerateLayouts(Small(), 4, limits);
  ASSERT_FALSE(layouts.empty());
  for (const TrainOptions& o : layouts) {
    EXPECT_LE(o.virtual_stages * o.pp, Small().model.n_layer) << LayoutName(o);
  }
}

// A brute force over a superset of the axes, asking the validator alone,
// finds the same layouts (pp = 1 keeps only 1F1B, as documented).
TEST(LayoutSpaceTest, EveryAcceptedLayoutAppears) {
  const SearchLimits limits{4, 3};
  std::set<std::string> enumerated;
  for (const TrainOptions& o : EnumerateLayouts(Small(), 4, limits)) {
    EXPECT_TRUE(enumerated.insert(LayoutName(o)).second) << LayoutName(o);
  }
  std::set<std::string> accepted;
  struct Context {
    int64_t cp;
    const char* comm;
  };
  for (int64_t tp = 1; tp <= 4; ++tp) {
    for (int64_t pp = 1; pp <= 4; ++pp) {
      for (Context cp :
           {Context{1, "ring"}, Context{2, "ring"}, Context{2, "a2a"},
            Context{4, "ring"}, Context{4, "a2a"}}) {
        for (ScheduleKind kind :
             {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
              ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1}) {
          if (pp == 1 && kind != ScheduleKind::k1F1B) continue;
          for (int64_t v = 1; v <= 3; ++v) {
            for (int64_t mbs = 1; mbs <= 4; ++mbs) {
              for (int64_t zero = 0; zero <= 3; ++zero) {
                for (bool sp : {false, true}) {
                  for (Recompute r : {Recompute::kNone, Recompute::kSelective,
                                      Recompute::kFull}) {
                    TrainOptions o = Small();
                    o.tp = tp;
                    o.pp = pp;
                    o.cp = cp.cp;
                    o.cp_comm = cp.comm;
                    o.dp = 0;
                    o.schedule = kind;
                    o.virtual_stages = v;
                    o.micro_batch_size = mbs;
                    o.zero = zero;
                    o.sequence_parallel = sp;
                    o.recompute = r;
                    if (ValidateLayout(o, 4).ok()) {
                      accepted.insert(LayoutName(o));
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(enumerated, accepted);
}

// Context parallelism is searched up to --max_cp, both ways where the
// heads allow all-to-all; its layouts are named by their cp size and way.
TEST(LayoutSpaceTest, SearchesContextParallelismBothWays) {
  std::set<std::string> names;
  for (const TrainOptions& o : EnumerateLayouts(Small(), 4, SearchLimits{})) {
    names.insert(LayoutName(o));
    if (o.cp == 1) {
      EXPECT_EQ(LayoutName(o).find(".cp"), std::string::npos);
    }
  }
  EXPECT_EQ(names.count("dp2.cp2-ring.tp1.pp1/1f1b/v1/mbs4/z1/none"), 1u);
  EXPECT_EQ(names.count("dp2.cp2-a2a.tp1.pp1/1f1b/v1/mbs4/z1/none"), 1u);
  EXPECT_EQ(names.count("dp1.cp4-ring.tp1.pp1/1f1b/v1/mbs8/z0/none"), 1u);
  EXPECT_EQ(names.count("dp1.cp2-ring.tp2.pp1/1f1b/v1/mbs8/z0/none/sp"), 1u);
  // 6 heads do not split over 4 cp ranks: no all-to-all at cp 4.
  EXPECT_EQ(names.count("dp1.cp4-a2a.tp1.pp1/1f1b/v1/mbs8/z0/none"), 0u);
  SearchLimits whole;
  whole.max_cp = 1;
  for (const TrainOptions& o : EnumerateLayouts(Small(), 4, whole)) {
    EXPECT_EQ(o.cp, 1) << LayoutName(o);
  }
}

}  // namespace
}  // namespace trellis
