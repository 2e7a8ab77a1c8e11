// Kernel costs by shape: the table's interpolation and roofline, its JSON
// form and the one-line errors of a malformed one, and a table measured on
// this machine telling a small GEMM from a large one.
#include "tools/plan/kernel_costs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "tools/plan/kernel_cost_measure.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

// Rates 1, 4 on rows 10, 1000; constant over in and out. Roofline far away.
KernelCosts TwoPointTable() {
  KernelCosts c;
  c.peak_flops = 1e15;
  c.memory_bandwidth = 1e15;
  RateGrid g;
  g.axes = {std::vector<double>{10, 1000}, {64}, {64}};
  g.rates = {1e9, 4e9};
  c.gemm_forward = c.gemm_backward_input = c.gemm_backward_weight = g;
  c.attention.axes = {std::vector<double>{32, 64}, {16}, {4}};
  c.attention.rates = {1e9, 2e9};
  c.elementwise.axes = {std::vector<double>{32}, {64}, {1}};
  c.elementwise.rates = {5e9};
  c.adamw.axes = {std::vector<double>{1000, 1e6}, {1}, {1}};
  c.adamw.rates = {1e9, 1e10};
  return c;
}

TEST(KernelCostsTest, InterpolatesInTheLogarithmsAndClampsAtTheEdges) {
  const KernelCosts c = TwoPointTable();
  const RateGrid& g = c.gemm_forward;
  EXPECT_DOUBLE_EQ(g.Interpolate(10, 64, 64), 1e9);
  EXPECT_DOUBLE_EQ(g.Interpolate(1000, 64, 64), 4e9);
  // Halfway in log(rows) is the geometric mean of the rates.
  EXPECT_NEAR(g.Interpolate(100, 64, 64), 2e9, 1e-3);
  // Beyond the table: the edge's rate, whatever the other axes say.
  EXPECT_NEAR(g.Interpolate(1, 7, 9000), 1e9, 1e-3);
  EXPECT_NEAR(g.Interpolate(1e6, 64, 64), 4e9, 1e-3);
  EXPECT_NEAR(AdamWRate(c, 31622.7766), std::sqrt(10.0) * 1e9, 1e3);
  EXPECT_NEAR(AttentionRate(c, 45.254834, 16, 4), std::sqrt(2.0) * 1e9, 1e3);
}

TEST(KernelCostsTest, GemmTimeIsBoundedByTheRoofline) {
  KernelCosts c = TwoPointTable();
  const double flops = 2.0 * 1000 * 64 * 64;
  EXPECT_NEAR(GemmSeconds(c, GemmPass::kForward, 1000, 64, 64, 4), flops / 4e9,
              1e-15);
  // A device whose peak is below the table's rate: the peak bounds it.
  c.peak_flops = 1e9;
  EXPECT_NEAR(GemmSeconds(c, GemmPass::kForward, 1000, 64, 64, 4), flops / 1e9,
              1e-15);
  // And one whose memory cannot feed it: the operands' bytes bound it.
  c.peak_flops = 1e15;
  c.memory_bandwidth = 1e6;
  const double bytes = 4.0 * (1000 * 64 + 64 * 64 + 1000 * 64);
  EXPECT_NEAR(GemmSeconds(c, GemmPass::kForward, 1000, 64, 64, 4), bytes / 1e6,
              1e-12);
}

TEST(KernelCostsTest, JsonReadsBackAndBenchSummariesCarryIt) {
  KernelCosts c = TwoPointTable();
  c.source = "test";
  const nlohmann::json j = KernelCostsToJson(c);
  absl::StatusOr<KernelCosts> back = KernelCostsFromJson(j, "t.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gemm_forward.rates.size(), 2u);
  EXPECT_NEAR(back->gemm_forward.Interpolate(100, 64, 64), 2e9, 1e-3);
  EXPECT_NEAR(back->memory_bandwidth, 1e15, 1);
  // A trellis-bench summary holds the table under "kernel_costs".
  const nlohmann::json summary = {{"device", "cpu"}, {"kernel_costs", j}};
  EXPECT_TRUE(KernelCostsFromJson(summary, "bench.json").ok());
}

// Version 2 counts attention calls by their (window, head) pairs; a
// version-1 table, measured over 2 windows a call and keyed by heads,
// reads with that axis doubled, so its rates land where they were
// measured.
TEST(KernelCostsTest, VersionOneTablesReadTheirHeadsAsPairsOfTwoWindows) {
  const nlohmann::json j = KernelCostsToJson(TwoPointTable());
  EXPECT_EQ(j.at("kernel_costs"), 2);
  EXPECT_TRUE(j.at("attention").contains("head_windows"));
  nlohmann::json old = j;
  old["kernel_costs"] = 1;
  old["attention"]["heads"] = old["attention"]["head_windows"];
  old["attention"].erase("head_windows");
  const absl::StatusOr<KernelCosts> c = KernelCostsFromJson(old, "v1.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention.axes[2], std::vector<double>{8});
  EXPECT_NEAR(AttentionRate(*c, 64, 16, 8), 2e9, 1e-3);
  // Doubled, a version-1 axis must still keep the bound of every axis.
  nlohmann::json huge = old;
  huge["attention"]["heads"] = {2147483648.0};
  EXPECT_THAT(
      std::string(KernelCostsFromJson(huge, "v1.json").status().message()),
      HasSubstr("at most 2^30"));
  // Each version names its own axis.
  old["attention"]["head_windows"] = old["attention"]["heads"];
  old["attention"].erase("heads");
  EXPECT_FALSE(KernelCostsFromJson(old, "v1.json").ok());
  nlohmann::json future = j;
  future["kernel_costs"] = 3;
  const absl::StatusOr<KernelCosts> unknown =
      KernelCostsFromJson(future, "v3.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("\"kernel_costs\": 2"));
}

// The ring's block attention: its own grid when the table has one (read
// and written back), AttentionRate at the block's length when not; a
// malformed one is refused like any other grid.
TEST(KernelCostsTest, RingBlocksUseTheirOwnRateWhereMeasured) {
  KernelCosts c = TwoPointTable();
  EXPECT_EQ(KernelCostsToJson(c).contains("block_attention"), false);
  EXPECT_NEAR(BlockAttentionRate(c, 64, 16, 4), 2e9, 1e-3);
  c.block_attention.axes = {std::vector<double>{16, 64}, {16}, {4}};
  c.block_attention.rates = {2e8, 5e8};
  EXPECT_NEAR(BlockAttentionRate(c, 64, 16, 4), 5e8, 1e-3);
  EXPECT_NEAR(BlockAttentionRate(c, 32, 16, 4), std::sqrt(0.1) * 1e9, 1e3);
  const nlohmann::json j = KernelCostsToJson(c);
  const absl::StatusOr<KernelCosts> back = KernelCostsFromJson(j, "t.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NEAR(BlockAttentionRate(*back, 16, 16, 4), 2e8, 1e-3);
  nlohmann::json broken = j;
  broken["block_attention"]["tflops"] = {1e-4};
  EXPECT_THAT(
      std::string(KernelCostsFromJson(broken, "t.json").status().message()),
      HasSubstr("block_attention.tflops"));
}

// The first line of the error `edit` makes of a good table.
std::string ErrorOf(void (*edit)(nlohmann::json&)) {
  nlohmann::json j = KernelCostsToJson(TwoPointTable());
  edit(j);
  const absl::StatusOr<KernelCosts> c = KernelCostsFromJson(j, "t.json");
  EXPECT_FALSE(c.ok());
  const std::string message(c.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(KernelCostsTest, MalformedTablesAreOneLineErrorsNamingTheField) {
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) { j.erase("kernel_costs"); }),
              HasSubstr("trellis-bench --profile --json=FILE"));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) { j.erase("gemm"); }),
              HasSubstr("no \"gemm\""));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) {
                j["gemm"]["rows"] = {9, 3};
              }),
              HasSubstr("strictly ascending"));
  EXPECT_THAT(
      ErrorOf([](nlohmann::json& j) { j["gemm"]["forward_tflops"] = {1}; }),
      HasSubstr("has 1 values; its axes make 2"));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) {
                j["attention"]["tflops"] = {0.001, -1};
              }),
              HasSubstr("\"attention.tflops\" is -1"));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) { j["peak_tflops"] = "fast"; }),
              HasSubstr("\"peak_tflops\" must be a number"));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) { j["device"] = "tpu"; }),
              HasSubstr("\"device\""));
  // A field of another JSON type is the same one-line error, not a throw.
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) {
                j["dtype"] = {512, 8192};
              }),
              HasSubstr("\"dtype\" must be"));
  EXPECT_THAT(ErrorOf([](nlohmann::json& j) {
                j["device"] = {{"a", 1}};
              }),
              HasSubstr("\"device\" must be"));
  EXPECT_THAT(
      ErrorOf([](nlohmann::json& j) { j["elementwise"]["width"] = {0.5}; }),
      HasSubstr("[1, 2^31]"));
}

TEST(KernelCostsTest, MissingOrBrokenFilesSayHowToWriteOne) {
  absl::StatusOr<KernelCosts> c = LoadKernelCosts("/nonexistent/t.json");
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("trellis-bench --profile"));
  const std::string path = ::testing::TempDir() + "/broken_costs.json";
  std::ofstream(path) << "{\"kernel_costs\": 1, ";
  c = LoadKernelCosts(path);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("not valid JSON"));
  std::remove(path.c_str());
}

// A table measured on this machine: every rate positive and finite, the
// roofline at least the fastest rate measured (so it never bounds a
// measured shape), and its JSON form readable.
TEST(KernelCostsTest, MeasuredTableIsWellFormed) {
  const KernelCosts c = MeasureKernelCosts(
      Device::Cpu(), DType::kF32, [] {}, 0, 0, "test");
  ASSERT_GT(c.block_attention.size(), 0u) << "the CPU measures ring blocks";
  for (const RateGrid* g :
       {&c.gemm_forward, &c.gemm_backward_input, &c.gemm_backward_weight,
        &c.attention, &c.block_attention, &c.elementwise, &c.adamw}) {
    ASSERT_EQ(g->rates.size(), g->size());
    for (double r : g->rates) EXPECT_TRUE(r > 0 && std::isfinite(r));
  }
  for (double r : c.gemm_forward.rates) EXPECT_GE(c.peak_flops, r);
  for (double r : c.elementwise.rates) EXPECT_GE(c.memory_bandwidth, r);
  const double flops = 2.0 * 512 * 256 * 1024;
  EXPECT_NEAR(GemmSeconds(c, GemmPass::kForward, 512, 256, 1024, 4),
              flops / c.gemm_forward.Interpolate(512, 256, 1024), 1e-12);
  const absl::StatusOr<KernelCosts> back =
      KernelCostsFromJson(KernelCostsToJson(c), "measured");
  EXPECT_TRUE(back.ok()) << back.status();
}

}  // namespace
}  // namespace trellis
