// Planned bubbles (trellis-bubbles --plan) against the published formulas.
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/bubbles/analysis.h"
#include "tools/bubbles/report.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ActionCosts Costs(double f, double b, double w) {
  ActionCosts costs;
  costs.forward = f;
  costs.backward_input = b;
  costs.backward_weight = w;
  return costs;
}

// Every stage's bubble and the whole step's equal `expected`.
void ExpectBubble(const BubbleReport& r, double expected,
                  const std::string& what) {
  ASSERT_EQ(r.steps.size(), 1u);
  const StepFigures& f = r.steps[0];
  ASSERT_EQ(static_cast<int>(f.stages.size()), r.pp) << what;
  for (const StageFigures& s : f.stages) {
    EXPECT_NEAR(s.bubble, expected, 1e-12) << what << " stage " << s.stage;
    EXPECT_NEAR(s.busy + s.idle, s.window, 1e-9) << what;
  }
  EXPECT_NEAR(f.whole.bubble, expected, 1e-12) << what;
  EXPECT_NEAR(f.planned, expected, 1e-12) << what;
}

// The formulas assume W is part of B (no separate weight-gradient pass):
// costs F = 1, B = 2, W = 0, and F = 2, B = 3, W = 0.
TEST(BubblesPlanTest, GPipeAnd1F1BMatchTheFormula) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (const ActionCosts& costs : {Costs(1, 2, 0), Costs(2, 3, 0)}) {
      for (int pp = 2; pp <= 8; ++pp) {
        for (int m = 1; m <= 32; ++m) {
          absl::StatusOr<BubbleReport> r = AnalyzePlan(kind, pp, m, 1, costs);
          ASSERT_TRUE(r.ok()) << r.status();
          const double formula = (pp - 1.0) / (m + pp - 1.0);
          ExpectBubble(*r, formula,
                       absl::StrCat(ScheduleKindName(kind), " pp=", pp,
                                    " m=", m, " F=", costs.forward));
          EXPECT_NEAR(r->steps[0].theory, formula, 1e-12);
        }
      }
    }
  }
}

TEST(BubblesPlanTest, InterleavedMatchesTheFormula) {
  for (int v : {2, 4}) {
    for (int pp = 2; pp <= 8; ++pp) {
      for (int m = pp; m <= 32; m += pp) {
        absl::StatusOr<BubbleReport> r = AnalyzePlan(
            ScheduleKind::kInterleaved1F1B, pp, m, v, Costs(1, 2, 0));
        ASSERT_TRUE(r.ok()) << r.status();
        const double formula = (pp - 1.0) / (v * m + pp - 1.0);
        ExpectBubble(*r, formula,
                     absl::StrCat("interleaved pp=", pp, " m=", m, " v=", v));
        EXPECT_NEAR(r->steps[0].theory, formula, 1e-12);
      }
    }
  }
}

// ZB-H1 idles (pp − 1)·(T_F + T_B − T_W) per stage (for T_W <= T_F, once
// the pipeline fills: m >= pp).
TEST(BubblesPlanTest, ZeroBubbleH1IdlesPpMinusOneTimesFPlusBMinusW) {
  for (const ActionCosts& c :
       {Costs(1, 1, 1), Costs(1, 2, 1), Costs(2, 2, 1), Costs(1, 1.5, 1),
        Costs(3, 4, 2), Costs(1, 1, 0.5)}) {
    for (int pp = 2; pp <= 8; ++pp) {
      for (int m = pp; m <= 32; ++m) {
        absl::StatusOr<BubbleReport> r =
            AnalyzePlan(ScheduleKind::kZeroBubbleH1, pp, m, 1, c);
        ASSERT_TRUE(r.ok()) << r.status();
        const double idle =
            (pp - 1) * (c.forward + c.backward_input - c.backward_weight);
        const double total =
            m * (c.forward + c.backward_input + c.backward_weight) + idle;
        ExpectBubble(
            *r, idle / total,
            absl::StrCat("zb-h1 pp=", pp, " m=", m, " costs ", c.forward, ",",
                         c.backward_input, ",", c.backward_weight));
        for (const StageFigures& s : r->steps[0].stages) {
          EXPECT_NEAR(s.idle, idle, 1e-9);
        }
      }
    }
  }
}

// With F, B and W costing the same, ZB-H1's bubble time is a third of
// 1F1B's (whose B includes W), and its fraction the textbook one.
TEST(BubblesPlanTest, ZeroBubbleH1IsAThirdOf1F1B) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = pp; m <= 32; ++m) {
      absl::StatusOr<BubbleReport> zb =
          AnalyzePlan(ScheduleKind::kZeroBubbleH1, pp, m, 1, Costs(1, 1, 1));
      absl::StatusOr<BubbleReport> one =
          AnalyzePlan(ScheduleKind::k1F1B, pp, m, 1, Costs(1, 2, 0));
      ASSERT_TRUE(zb.ok() && one.ok());
      EXPECT_NEAR(3 * zb->steps[0].whole.idle, one->steps[0].whole.idle, 1e-9)
          << "pp=" << pp << " m=" << m;
      EXPECT_NEAR(zb->steps[0].whole.bubble,
                  TheoreticalBubble(ScheduleKind::kZeroBubbleH1, pp, m), 1e-12);
    }
  }
}

// The timeline holds every F, B and W once, within the makespan, and the
// receive waits add up to each stage's recorded receive wait.
TEST(BubblesPlanTest, TimelineHoldsEveryComputeOnce) {
  absl::StatusOr<BubbleReport> r =
      AnalyzePlan(ScheduleKind::kInterleaved1F1B, 4, 8, 2, Costs(1, 2, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  const StepFigures& f = r->steps[0];
  ASSERT_EQ(f.timeline.rows.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    const TimelineRow& row = f.timeline.rows[s];
    EXPECT_EQ(row.label, absl::StrCat("stage ", s));
    EXPECT_EQ(row.compute.size(), 3u * 8 * 2);
    double busy = 0, wait = 0;
    for (const TimelineBlock& b : row.compute) {
      EXPECT_GE(b.start, 0.0);
      EXPECT_LE(b.end, f.timeline.end + 1e-9);
      busy += b.end - b.start;
    }
    for (const auto& [start, end] : row.waits) wait += end - start;
    EXPECT_NEAR(busy, f.stages[s].busy, 1e-9);
    EXPECT_NEAR(wait, f.stages[s].recv_wait, 1e-9);
    EXPECT_NEAR(busy, 8 * 2 * (1 + 2 + 1), 1e-9);
  }
  const std::string svg = TimelineSvg(f.timeline);
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("interleaved-1f1b  pp=4 m=8 v=2  plan"));
  EXPECT_THAT(svg, HasSubstr("<title>W mb 7 vstage 1:"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

TEST(BubblesPlanTest, RejectsBadShapesAndCosts) {
  EXPECT_THAT(std::string(AnalyzePlan(ScheduleKind::kInterleaved1F1B, 4, 6, 2,
                                      Costs(1, 1, 1))
                              .status()
                              .message()),
              HasSubstr("multiple of the pipeline stages"));
  EXPECT_THAT(
      std::string(AnalyzePlan(ScheduleKind::k1F1B, 4, 8, 1, Costs(-1, 1, 1))
                      .status()
                      .message()),
      HasSubstr("--costs F,B,W must be at least 0"));
}

// Sizes that ran out of memory or wrote a timeline of hundreds of MB are
// refused at once, products that overflow int32 included.
TEST(BubblesPlanTest, RejectsPlansTooLargeToDraw) {
  for (const auto& [pp, m, v] :
       {std::tuple{100000, 100000, 1}, std::tuple{1000, 1000, 1},
        std::tuple{65536, 65536, 65536}, std::tuple{129, 128, 1}}) {
    const absl::StatusOr<BubbleReport> r = AnalyzePlan(
        v > 1 ? ScheduleKind::kInterleaved1F1B : ScheduleKind::k1F1B, pp, m, v,
        Costs(1, 1, 1));
    ASSERT_FALSE(r.ok()) << pp << " " << m << " " << v;
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr("--pp="), HasSubstr("choose smaller sizes")));
  }
  EXPECT_TRUE(
      AnalyzePlan(ScheduleKind::k1F1B, 128, 128, 1, Costs(1, 1, 1)).ok());
}

TEST(BubblesPlanTest, ReportNamesEveryFigure) {
  absl::StatusOr<BubbleReport> r =
      AnalyzePlan(ScheduleKind::k1F1B, 2, 4, 1, Costs(1, 1, 1));
  ASSERT_TRUE(r.ok());
  const std::string text = FormatReport(*r);
  EXPECT_THAT(text, HasSubstr("1f1b, pp 2, 4 microbatches"));
  EXPECT_THAT(text, HasSubstr("bubble"));
  EXPECT_THAT(text, HasSubstr("theory 20.0%"));
  const nlohmann::json j = ReportToJson(*r);
  EXPECT_EQ(j["mode"], "plan");
  EXPECT_EQ(j["steps"][0]["stages"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["steps"][0]["theory"].get<double>(), 0.2);
  // F, B, W = 1: the gradient leaves before W, so the bubble is below the
  // W-in-B formula: (pp−1)(F+B) / (m(F+B+W) + (pp−1)(F+B)) = 2 / 14.
  EXPECT_NEAR(j["steps"][0]["whole"]["bubble"].get<double>(), 2.0 / 14.0,
              1e-12);
}

}  // namespace
}  // namespace trellis
