// A mixture of experts' routing report (tools/trainer/health/
// routing_report.h): the balance losses averaged over layers and
// microbatches, each MoE layer's busiest expert over the mean, and where
// they appear (the log line, TensorBoard); off for dense models.
#include "tools/trainer/health/routing_report.h"

#include <gtest/gtest.h>

#include <string>

#include "parallel/communicator.h"

namespace trellis {
namespace {

TEST(RoutingReportTest, AveragesLossesAndComparesTheBusiestExpert) {
  SelfCommunicator pp("pp"), dp("dp");
  // Layers 1 and 3 of 4 route over 4 experts; 2 microbatches were summed.
  const RoutingReport report(/*n_layer=*/4, /*experts=*/4,
                             /*microbatches=*/2);
  ASSERT_TRUE(report.on());
  std::vector<ModelChunk::LayerRouting> mine(2);
  mine[0] = {.layer = 1,
             .aux_loss = 2.0,
             .z_loss = 0.5,
             .expert_slots = {10, 10, 10, 10}};
  mine[1] = {.layer = 3,
             .aux_loss = 3.0,
             .z_loss = 1.5,
             .expert_slots = {25, 5, 5, 5}};
  StepMetrics m;
  report.Report(mine, pp, dp, m);
  // Per microbatch 1.0 and 1.5 (aux), 0.25 and 0.75 (z); mean over layers.
  EXPECT_DOUBLE_EQ(m.moe_aux_loss, 1.25);
  EXPECT_DOUBLE_EQ(m.moe_z_loss, 0.5);
  ASSERT_EQ(m.expert_load.size(), 2u);
  EXPECT_EQ(m.expert_load[0], (std::pair<int64_t, double>{1, 1.0}));
  EXPECT_EQ(m.expert_load[1], (std::pair<int64_t, double>{3, 2.5}));

  const std::string line = FormatLogLine(m, 10);
  EXPECT_NE(line.find("moe aux 1.2500 z 0.5000 load 2.50 (layer 3)"),
            std::string::npos)
      << line;
  bool tensorboard = false;
  for (const auto& [tag, value] : TensorBoardScalars(m)) {
    if (tag == "moe/expert_load/layer_3") tensorboard = value == 2.5;
  }
  EXPECT_TRUE(tensorboard);
}

TEST(RoutingReportTest, DenseModelsReportNothing) {
  SelfCommunicator pp("pp"), dp("dp");
  const RoutingReport report(4, 0, 2);
  EXPECT_FALSE(report.on());
  StepMetrics m;
  report.Report({}, pp, dp, m);
  EXPECT_TRUE(m.expert_load.empty());
  EXPECT_EQ(FormatLogLine(m, 10).find("moe"), std::string::npos);
}

}  // namespace
}  // namespace trellis
