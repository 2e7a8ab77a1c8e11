// ModelConfig as JSON: every option round-trips, files from before an
// option existed read with its default, and bad values name their key.
#include "tools/checkpoint/model_config_json.h"

#include <gtest/gtest.h>

#include <string>

namespace trellis {
namespace {

TEST(ModelConfigJsonTest, RoundTripsEveryOption) {
  ModelConfig c;
  c.n_layer = 7;
  c.n_head = 3;
  c.d_model = 96;
  c.seq_len = 33;
  c.vocab_size = 1001;
  const nlohmann::json j = ModelConfigToJson(c);
  EXPECT_EQ(j.at("family"), "gpt2");
  EXPECT_EQ(j.at("n_layer"), 7);
  absl::StatusOr<ModelConfig> back = ModelConfigFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
}

TEST(ModelConfigJsonTest, RoundTripsALlamaConfig) {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  c.n_kv_heads = 2;
  c.ffn_hidden = 300;
  c.ffn_dim_multiplier = 1.3;
  c.rope_theta = 500000;
  c.rope_scaling = RopeScalingType::kLlama3;
  c.rope_factor = 32;
  c.rope_original_max_positions = 4096;
  c.norm_eps = 1e-6;
  c.tie_embeddings = false;
  const nlohmann::json j = ModelConfigToJson(c);
  EXPECT_EQ(j.at("family"), "llama");
  EXPECT_EQ(j.at("rope_scaling"), "llama3");
  EXPECT_EQ(j.at("tie_embeddings"), false);
  EXPECT_EQ(j.at("rope_theta"), 500000.0);
  absl::StatusOr<ModelConfig> back = ModelConfigFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
}

TEST(ModelConfigJsonTest, FilesWithoutTheFamilyAreGpt2) {
  const nlohmann::json old = nlohmann::json::parse(
      R"({"n_layer": 2, "n_head": 2, "d_model": 16, "seq_len": 8,
          "vocab_size": 257})");
  absl::StatusOr<ModelConfig> c = ModelConfigFromJson(old);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamilyKind::kGpt2);
  EXPECT_EQ(c->d_model, 16);
}

TEST(ModelConfigJsonTest, BadValuesNameTheirKey) {
  nlohmann::json j = ModelConfigToJson(ModelConfig{});
  j["family"] = "gpt5";
  absl::StatusOr<ModelConfig> c = ModelConfigFromJson(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"family\""), std::string::npos)
      << c.status();
  j = ModelConfigToJson(ModelConfig{});
  j["n_head"] = "four";
  c = ModelConfigFromJson(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"n_head\""), std::string::npos);
  j.erase("n_head");
  c = ModelConfigFromJson(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("lacks \"n_head\""), std::string::npos);
}

}  // namespace
}  // namespace trellis
