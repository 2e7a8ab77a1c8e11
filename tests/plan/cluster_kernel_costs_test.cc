// A cluster's kernel cost table: named by a cluster file (relative to it)
// or inline, or taken from a trellis-bench --profile summary; a missing
// file or a table of another device is one line naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/plan/bench_profile.h"
#include "tools/plan/cluster.h"
#include "tools/plan/kernel_costs.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

KernelCosts Table(const std::string& device) {
  KernelCosts k;
  k.device = device;
  k.dtype = device == "cpu" ? "f32" : "bf16";
  k.source = "test";
  k.peak_flops = 1e12;
  k.memory_bandwidth = 1e11;
  RateGrid g;
  g.axes = {std::vector<double>{32, 1024}, {64}, {64}};
  g.rates = {1e10, 5e11};
  k.gemm_forward = k.gemm_backward_input = k.gemm_backward_weight = g;
  k.attention.axes = {std::vector<double>{64}, {32}, {4}};
  k.attention.rates = {1e11};
  k.elementwise.axes = {std::vector<double>{32}, {64}, {1}};
  k.elementwise.rates = {5e10};
  k.adamw.axes = {std::vector<double>{1000}, {1}, {1}};
  k.adamw.rates = {2e10};
  return k;
}

nlohmann::json CpuCluster() {
  return {{"device", "cpu"},
          {"gpus_per_node", 2},
          {"nodes", 1},
          {"memory_gib", 4},
          {"peak_tflops", 0.1},
          {"gemm_efficiency", 1},
          {"attention_efficiency", 0.4},
          {"memory_bandwidth_gbs", 20},
          {"intra_node_bandwidth_gbs", 5},
          {"intra_node_latency_us", 5},
          {"inter_node_bandwidth_gbs", 5},
          {"inter_node_latency_us", 5}};
}

class ClusterKernelCostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test and process: ctest runs this binary's tests
    // side by side, and each removes its own at the end.
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat(
               "cluster_costs_", ::getpid(), "_",
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const nlohmann::json& j) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << j.dump();
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ClusterKernelCostsTest, AClusterFileNamesItsTableRelativeToItself) {
  Write("table.json", KernelCostsToJson(Table("cpu")));
  nlohmann::json cluster = CpuCluster();
  cluster["kernel_costs"] = "table.json";
  absl::StatusOr<ClusterSpec> c = LoadCluster(Write("c.json", cluster));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_NE(c->kernel_costs, nullptr);
  EXPECT_DOUBLE_EQ(c->kernel_costs->gemm_forward.Interpolate(1024, 64, 64),
                   5e11);
  // Written back, the table travels inline and reads back the same.
  absl::StatusOr<ClusterSpec> again =
      ClusterFromJson(ClusterToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_NE(again->kernel_costs, nullptr);
  EXPECT_DOUBLE_EQ(again->kernel_costs->gemm_forward.Interpolate(32, 64, 64),
                   1e10);
}

TEST_F(ClusterKernelCostsTest, AMissingOrForeignTableIsOneLine) {
  nlohmann::json cluster = CpuCluster();
  cluster["kernel_costs"] = "absent.json";
  absl::StatusOr<ClusterSpec> c = LoadCluster(Write("c.json", cluster));
  ASSERT_FALSE(c.ok());
  std::string message(c.status().message());
  EXPECT_THAT(message, HasSubstr("\"kernel_costs\""));
  EXPECT_THAT(message, HasSubstr("absent.json: no such file"));
  EXPECT_THAT(message, HasSubstr("trellis-bench --profile --json=FILE"));
  EXPECT_EQ(message.find('\n'), std::string::npos);
  cluster["kernel_costs"] = KernelCostsToJson(Table("cuda"));
  c = LoadCluster(Write("c.json", cluster));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("measured on cuda but the cluster runs on cpu"));
  cluster["kernel_costs"] = 7;
  c = LoadCluster(Write("c.json", cluster));
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("must name a kernel cost table file"));
}

TEST_F(ClusterKernelCostsTest, ABenchSummaryWithATableGivesTheClusterIt) {
  absl::StatusOr<ClusterSpec> c = ClusterFromJson(CpuCluster(), "c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const nlohmann::json summary = {
      {"device", "cpu"}, {"kernel_costs", KernelCostsToJson(Table("cpu"))}};
  ASSERT_TRUE(ApplyBenchProfile(summary, "bench.json", *c).ok());
  ASSERT_NE(c->kernel_costs, nullptr);
  EXPECT_THAT(c->source, HasSubstr("kernel costs by shape from bench.json"));
  const nlohmann::json gpu = {
      {"device", "cuda"}, {"kernel_costs", KernelCostsToJson(Table("cuda"))}};
  EXPECT_THAT(std::string(ApplyBenchProfile(gpu, "g.json", *c).message()),
              HasSubstr("measured on cuda"));
}

}  // namespace
}  // namespace trellis
