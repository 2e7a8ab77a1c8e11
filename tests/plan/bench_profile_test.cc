// Kernel rates from a trellis-bench profile: efficiencies are the counted
// FLOPs over the profiled kernels' time, against the cluster's peak.
#include "tools/plan/bench_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tools/plan/stage_facts.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

nlohmann::json Profile(double matmul_ms, double attention_ms) {
  return {{"device", "cuda"},
          {"model",
           {{"n_layer", 2},
            {"n_head", 4},
            {"d_model", 64},
            {"seq_len", 32},
            {"vocab_size", 100}}},
          {"tokens_per_step", 1000.0},
          {"kernels",
           {{{"name", "MatmulForward"}, {"calls", 10}, {"ms", matmul_ms / 2}},
            {{"name", "MatmulBackwardWeight"},
             {"calls", 10},
             {"ms", matmul_ms / 2}},
            {{"name", "AttentionForward"}, {"calls", 2}, {"ms", attention_ms}},
            {{"name", "LayerNormForward"}, {"calls", 4}, {"ms", 5.0}}}}};
}

TEST(BenchProfileTest, EfficienciesAreCountedFlopsOverKernelTime) {
  ClusterSpec c;
  c.device = DeviceType::kCUDA;
  c.peak_flops = 1e12;
  TrainOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.d_model = 64;
  o.model.seq_len = 32;
  o.model.vocab_size = 100;
  const double gemm = 1000.0 * 6 * (2.0 * BlockGemmElements(o) + 100 * 64);
  const double attention = 1000.0 * 2 * 6 * 32 * 64;
  // Kernel times that make both rates a quarter of the peak.
  const double matmul_ms = gemm / 0.25e12 * 1e3;
  const double attention_ms = attention / 0.25e12 * 1e3;
  ASSERT_TRUE(
      ApplyBenchProfile(Profile(matmul_ms, attention_ms), "b.json", c).ok());
  EXPECT_NEAR(c.gemm_efficiency, 0.25, 1e-9);
  EXPECT_NEAR(c.attention_efficiency, 0.25, 1e-9);
}

TEST(BenchProfileTest, RefusesProfilesItCannotUse) {
  ClusterSpec c;
  c.device = DeviceType::kCUDA;
  c.peak_flops = 1e12;
  nlohmann::json p = Profile(1, 1);
  p["kernels"] = nlohmann::json::array();
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("--profile"));
  p = Profile(1, 1);
  p["device"] = "cpu";
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("measured on cpu"));
  p = Profile(1, 1);
  p.erase("model");
  EXPECT_FALSE(ApplyBenchProfile(p, "b.json", c).ok());
  // Fields of another JSON type refuse in one line rather than throw.
  p = Profile(1, 1);
  p["device"] = {1, 2};
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("\"device\" must be"));
  p = Profile(1, 1);
  p["kernels"] = {"MatmulForward", {{"name", 7}, {"ms", "slow"}}};
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("times no Matmul"));
  p = Profile(1, 1);
  p["model"]["d_model"] = "wide";
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("not a valid model shape"));
  p = Profile(1, 1);
  p["tokens_per_step"] = {1000};
  EXPECT_THAT(std::string(ApplyBenchProfile(p, "b.json", c).message()),
              HasSubstr("tokens_per_step"));
}

}  // namespace
}  // namespace trellis
