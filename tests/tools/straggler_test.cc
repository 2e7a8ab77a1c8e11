// The straggler arithmetic: the median, who counts as a straggler against
// a threshold, and the line that names one.
#include "tools/trainer/health/straggler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace trellis {
namespace {

using ::testing::HasSubstr;

TEST(StragglerTest, Median) {
  EXPECT_EQ(Median({3.0}), 3.0);
  EXPECT_EQ(Median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(StragglerTest, TheSlowestPastTheThresholdIsNamed) {
  // Median 1.0: 1.25 passes 1.2×, 1.15 does not.
  EXPECT_EQ(FindStraggler({1.0, 1.0, 1.25, 0.9, 1.1}, 1.2), 2);
  EXPECT_EQ(FindStraggler({1.0, 1.0, 1.15, 0.9, 1.1}, 1.2), std::nullopt);
  // Two over it: the slower.
  EXPECT_EQ(FindStraggler({1.0, 3.0, 1.0, 2.0, 1.0}, 1.2), 1);
  // Equal times or nothing measured: nobody.
  EXPECT_EQ(FindStraggler({2.0, 2.0}, 1.2), std::nullopt);
  EXPECT_EQ(FindStraggler({0.0, 0.0, 0.0}, 1.2), std::nullopt);
}

TEST(StragglerTest, TheLineNamesRankNodeCoordinatesAndRatio) {
  const Straggler s{5, "node7", MeshCoord{1, 0, 2}, 0.4123, 0.1201};
  const std::string line = s.Describe(10);
  EXPECT_THAT(line, HasSubstr("rank 5 (node7, dp 1 tp 0 pp 2)"));
  EXPECT_THAT(line, HasSubstr("412.3 ms"));
  EXPECT_THAT(line, HasSubstr("last 10 steps"));
  EXPECT_THAT(line, HasSubstr("median of 120.1 ms"));
  EXPECT_THAT(line, HasSubstr("(3.43x)"));
}

TEST(StragglerTest, OneRankExchangesEveryNStepsAndIsNeverAStraggler) {
  SelfCommunicator world("world");
  absl::StatusOr<std::unique_ptr<StragglerMonitor>> m =
      StragglerMonitor::Create(world, MeshCoord{}, 2, 1.2, "");
  ASSERT_TRUE(m.ok()) << m.status();
  double ratio = -1;
  EXPECT_FALSE((*m)->EndStep(0.5, &ratio).has_value());
  EXPECT_EQ(ratio, 0);  // no exchange yet
  EXPECT_FALSE((*m)->EndStep(0.5, &ratio).has_value());
  EXPECT_EQ(ratio, 1.0);  // exchanged: the slowest is the median
}

TEST(StragglerTest, TheSlowRankHookIsChecked) {
  SelfCommunicator world("world");
  for (const char* bad : {"3", "a:1", "1:-5", "1:2:3"}) {
    absl::StatusOr<std::unique_ptr<StragglerMonitor>> m =
        StragglerMonitor::Create(world, MeshCoord{}, 2, 1.2, bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("RANK:MS"));
  }
}

}  // namespace
}  // namespace trellis
