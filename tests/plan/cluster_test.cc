// Cluster descriptions: presets, JSON files, and one-line errors naming the
// field at fault.
#include "tools/plan/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace trellis {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::json GoodCluster() {
  return {{"gpus_per_node", 4},
          {"nodes", 2},
          {"memory_gib", 40},
          {"peak_tflops", 312},
          {"gemm_efficiency", 0.6},
          {"attention_efficiency", 0.4},
          {"memory_bandwidth_gbs", 1500},
          {"intra_node_bandwidth_gbs", 200},
          {"intra_node_latency_us", 4},
          {"inter_node_bandwidth_gbs", 20},
          {"inter_node_latency_us", 8}};
}

TEST(ClusterTest, ReadsEveryFieldInItsUnit) {
  absl::StatusOr<ClusterSpec> c = ClusterFromJson(GoodCluster(), "a.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world(), 8);
  EXPECT_DOUBLE_EQ(c->memory_bytes, 40.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c->peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(c->intra.bandwidth, 200e9);
  EXPECT_DOUBLE_EQ(c->inter.latency, 8e-6);
  EXPECT_EQ(c->device, DeviceType::kCUDA);
  EXPECT_TRUE(c->async_collectives);
  // The JSON it writes reads back the same.
  absl::StatusOr<ClusterSpec> again =
      ClusterFromJson(ClusterToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->memory_bandwidth, c->memory_bandwidth);
  EXPECT_EQ(again->world(), 8);
}

TEST(ClusterTest, EachMissingFieldIsNamedInOneLine) {
  const nlohmann::json good = GoodCluster();
  for (const auto& [field, value] : good.items()) {
    nlohmann::json j = GoodCluster();
    j.erase(field);
    absl::StatusOr<ClusterSpec> c = ClusterFromJson(j, "x.json");
    ASSERT_FALSE(c.ok()) << field;
    const std::string message(c.status().message());
    EXPECT_THAT(message, HasSubstr("\"" + field + "\" is missing"));
    EXPECT_THAT(message, HasSubstr("x.json"));
    EXPECT_THAT(message, Not(HasSubstr("\n")));
  }
}

TEST(ClusterTest, NegativeOrOutOfRangeFieldsAreNamed) {
  const nlohmann::json good = GoodCluster();
  for (const auto& [field, value] : good.items()) {
    nlohmann::json j = GoodCluster();
    j[field] = -1;
    absl::StatusOr<ClusterSpec> c = ClusterFromJson(j, "x.json");
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(field)) << field;
  }
  nlohmann::json j = GoodCluster();
  j["gemm_efficiency"] = 1.5;
  EXPECT_THAT(std::string(ClusterFromJson(j, "x").status().message()),
              HasSubstr("gemm_efficiency"));
  j = GoodCluster();
  j["nodes"] = 1.5;
  EXPECT_THAT(std::string(ClusterFromJson(j, "x").status().message()),
              HasSubstr("whole number"));
  j = GoodCluster();
  j["peak_tflops"] = "fast";
  EXPECT_THAT(std::string(ClusterFromJson(j, "x").status().message()),
              HasSubstr("must be a number"));
  j = GoodCluster();
  j["memory_gib"] = 0;
  EXPECT_THAT(std::string(ClusterFromJson(j, "x").status().message()),
              HasSubstr("must be positive"));
}

// A string field of another JSON type threw nlohmann's type_error out of
// trellis-plan; absurd counts overflowed int64 (1e19 nodes in the cast,
// 2^40 × 2^40 in world()) and absurd figures became infinite rates that
// ClusterToJson could not write back.
TEST(ClusterTest, WrongTypesAndAbsurdValuesAreNamedInOneLine) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* what;
  };
  for (const Case& k :
       {Case{"name", 3, "\"name\" must be a string, not 3"},
        Case{"device", {{"kind", "cuda"}}, "\"device\""},
        Case{"source", nullptr, "\"source\""}, Case{"nodes", 1e19, "\"nodes\""},
        Case{"gpus_per_node", int64_t{1} << 40, "at most"},
        Case{"memory_gib", 1e300, "at most 1e15"},
        Case{"intra_node_latency_us", 1e300, "at most 1e15"}}) {
    nlohmann::json j = GoodCluster();
    j[k.field] = k.value;
    const absl::StatusOr<ClusterSpec> c = ClusterFromJson(j, "x.json");
    ASSERT_FALSE(c.ok()) << k.field;
    const std::string message(c.status().message());
    EXPECT_THAT(message, HasSubstr(k.what)) << k.field;
    EXPECT_THAT(message, HasSubstr("x.json"));
    EXPECT_THAT(message, Not(HasSubstr("\n")));
  }
  EXPECT_FALSE(LoadCluster("h200-8x99999999999").ok());
}

TEST(ClusterTest, GpuPresetsScaleWithNodes) {
  absl::StatusOr<ClusterSpec> h100 = LoadCluster("h100-sxm-8x16");
  ASSERT_TRUE(h100.ok()) << h100.status();
  EXPECT_EQ(h100->world(), 128);
  EXPECT_DOUBLE_EQ(h100->peak_flops, 989e12);
  EXPECT_GT(h100->intra.bandwidth, h100->inter.bandwidth);
  absl::StatusOr<ClusterSpec> h200 = LoadCluster("h200-8x2");
  ASSERT_TRUE(h200.ok()) << h200.status();
  EXPECT_EQ(h200->world(), 16);
  EXPECT_GT(h200->memory_bytes, h100->memory_bytes);
  EXPECT_FALSE(LoadCluster("h100-sxm-8x0").ok());
  EXPECT_FALSE(LoadCluster("h100-sxm-8xmany").ok());
  EXPECT_THAT(std::string(LoadCluster("tpu-v5").status().message()),
              HasSubstr("h100-sxm-8xN"));
  EXPECT_FALSE(LoadCluster("/nonexistent/cluster.json").ok());
}

TEST(ClusterTest, CpuPresetIsMeasured) {
  const ClusterSpec cpu = MeasureCpuCluster();
  EXPECT_EQ(cpu.device, DeviceType::kCPU);
  EXPECT_GE(cpu.devices_per_node, 1);
  EXPECT_GT(cpu.peak_flops, 1e8);  // any core does 0.1 GFLOP/s
  EXPECT_GT(cpu.memory_bandwidth, 1e8);
  EXPECT_GT(cpu.attention_efficiency, 0);
  EXPECT_LE(cpu.attention_efficiency, 1);
  EXPECT_FALSE(cpu.async_collectives);
  EXPECT_TRUE(ClusterFromJson(ClusterToJson(cpu), "cpu").ok());
}

}  // namespace
}  // namespace trellis
