// trellis-convert on Hugging Face mixtures of experts and Qwen3 models
// written here byte by byte: MixtralForCausalLM's router and experts in
// trellis's layout and back bit for bit, what Mixtral cannot express
// refused on the way out; Qwen3ForCausalLM and Qwen3MoeForCausalLM (q/k
// norms, a head width of their own, a dense layer before the experts) back
// bit for bit with the same config keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/hf_convert_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/convert/convert.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"

namespace trellis {
namespace {

using test::ConvertTo;
using test::ExpectSameTensors;
using test::ReadJson;
using test::TrellisTensor;
namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(HfMixtralConvertTest, HfToTrellisToHfIsBitExactInTrellisLayout) {
  const test::TinyLlama m{.dtype = DType::kBF16, .shards = 2, .experts = 4};
  const std::string dir = test::Scratch();
  fs::create_directories(dir + "/in");
  test::WriteTinyLlama(dir + "/in", m);
  absl::StatusOr<ConvertSummary> in =
      ConvertTo(dir + "/in", "trellis", dir + "/ckpt");
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<TrainingState> state =
      ReadTrainingState(dir + "/ckpt/step_00000000");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->model.family, moe::kKind);
  EXPECT_EQ(state->model.experts, 4);
  EXPECT_EQ(state->model.experts_per_token, 2);
  EXPECT_EQ(state->model.moe_ffn_hidden, test::kLlamaFfn);
  EXPECT_TRUE(state->model.moe_norm_topk);
  EXPECT_FALSE(state->model.moe_sigmoid);
  // output_router_logits false: HF adds no balance loss, nor does trellis.
  EXPECT_EQ(state->model.moe_aux_loss_coeff, 0.0);

  // The router is gateᵀ, gate_up_proj [w1; w3]ᵀ, down_proj w2ᵀ.
  const auto hf = test::TinyLlamaTensors(m);
  auto value = [&](const std::string& name, int64_t i) {
    for (size_t k = 0; k < hf.size(); ++k) {
      if (hf[k].first.first == name) {
        return test::TinyLlamaValue(k, i, hf[k].second, m.dtype);
      }
    }
    ADD_FAILURE() << name;
    return 0.0f;
  };
  const int64_t c = test::kLlamaHidden, f = test::kLlamaFfn, e = 4;
  const std::string step = dir + "/ckpt/step_00000000";
  const std::string moe = "model.layers.1.block_sparse_moe.";
  const std::vector<float> router =
      TrellisTensor(step, "model.layers.1.mlp.gate.weight");
  ASSERT_THAT(router, SizeIs(c * e));
  EXPECT_EQ(router[5 * e + 3], value(moe + "gate.weight", 3 * c + 5));
  const std::vector<float> gate_up =
      TrellisTensor(step, "model.layers.1.mlp.experts.2.gate_up_proj.weight");
  ASSERT_THAT(gate_up, SizeIs(c * 2 * f));
  EXPECT_EQ(gate_up[5 * 2 * f + 7],
            value(moe + "experts.2.w1.weight", 7 * c + 5));
  EXPECT_EQ(gate_up[5 * 2 * f + f + 7],
            value(moe + "experts.2.w3.weight", 7 * c + 5));
  const std::vector<float> down =
      TrellisTensor(step, "model.layers.1.mlp.experts.2.down_proj.weight");
  EXPECT_EQ(down[9 * c + 2], value(moe + "experts.2.w2.weight", 2 * f + 9));

  absl::StatusOr<ConvertSummary> out =
      ConvertTo(dir + "/ckpt", "hf", dir + "/out", 60'000);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectSameTensors(dir + "/in", dir + "/out");
  const nlohmann::json a = ReadJson(dir + "/in/config.json");
  const nlohmann::json b = ReadJson(dir + "/out/config.json");
  for (const char* key :
       {"model_type", "architectures", "hidden_size", "intermediate_size",
        "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
        "num_local_experts", "num_experts_per_tok", "output_router_logits",
        "sliding_window", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
        "torch_dtype"}) {
    EXPECT_EQ(b.value(key, nlohmann::json()), a.value(key, nlohmann::json()))
        << key;
  }
}

// Qwen3 and Qwen3-MoE: hf → trellis → hf bit for bit, their configs'
// keys the same, and the trellis model Qwen3's (q/k norms, heads 12 wide,
// the dense layer first).
TEST(HfQwen3ConvertTest, HfToTrellisToHfIsBitExact) {
  for (const bool experts : {false, true}) {
    SCOPED_TRACE(experts ? "qwen3_moe" : "qwen3");
    test::TinyLlama m{.dtype = DType::kBF16, .qwen3 = true};
    if (experts) {
      m.experts = 4;
      m.dense_layers = {0};
      m.shards = 2;
    }
    const std::string dir = test::Scratch();
    fs::create_directories(dir + "/in");
    test::WriteTinyLlama(dir + "/in", m);
    absl::StatusOr<ConvertSummary> in =
        ConvertTo(dir + "/in", "trellis", dir + "/ckpt");
    ASSERT_TRUE(in.ok()) << in.status();
    absl::StatusOr<TrainingState> state =
        ReadTrainingState(dir + "/ckpt/step_00000000");
    ASSERT_TRUE(state.ok()) << state.status();
    const ModelConfig& c = state->model;
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.HeadDim(), test::kQwenHeadDim);
    if (experts) {
      EXPECT_EQ(c.family, moe::kKind);
      EXPECT_EQ(c.moe_first_dense, 1);
      EXPECT_EQ(c.moe_ffn_hidden, test::kLlamaFfn / 2);
      EXPECT_EQ(c.ffn_hidden, test::kLlamaFfn);
      EXPECT_TRUE(c.moe_norm_topk);
    }
    absl::StatusOr<ConvertSummary> out =
        ConvertTo(dir + "/ckpt", "hf", dir + "/out", experts ? 60'000 : 0);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSameTensors(dir + "/in", dir + "/out");
    const nlohmann::json a = ReadJson(dir + "/in/config.json");
    const nlohmann::json b = ReadJson(dir + "/out/config.json");
    for (const char* key :
         {"model_type", "architectures", "hidden_size", "intermediate_size",
          "head_dim", "num_attention_heads", "num_key_value_heads",
          "num_experts", "num_experts_per_tok", "moe_intermediate_size",
          "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
          "use_sliding_window", "tie_word_embeddings", "torch_dtype"}) {
      EXPECT_EQ(b.value(key, nlohmann::json()), a.value(key, nlohmann::json()))
          << key;
    }
  }
}

// A tiny mixture of 2 layers of 4 experts, 2 per token.
ModelConfig TinyMixture() {
  ModelConfig config;
  config.family = moe::kKind;
  config.n_layer = 2;
  config.n_head = 2;
  config.d_model = 8;
  config.seq_len = 8;
  config.vocab_size = 11;
  config.experts = 4;
  config.experts_per_token = 2;
  return config;
}

// Saves `state`'s model, freshly initialized, as checkpoint `dir`.
void SaveFresh(const std::string& dir, const TrainingState& state) {
  ParameterSet params;
  AddModelParameters(state.model, ChunkPlan{0, state.model.n_layer, true, true},
                     TpPlace{}, 5, Device::Cpu(), DType::kF32, params);
  SelfCommunicator world("world");
  ASSERT_TRUE(SaveCheckpoint(dir, state, params, nullptr, world, true).ok());
}

TEST(HfMixtralConvertTest, RefusesToWriteWhatMixtralCannotExpress) {
  const std::string dir = test::Scratch();
  TrainingState state;
  state.model = TinyMixture();
  state.model.moe_first_dense = 1;
  state.tokenizer = "byte";
  SaveFresh(dir + "/a", state);
  absl::StatusOr<ConvertSummary> hf = ConvertTo(dir + "/a", "hf", dir + "/hf");
  ASSERT_FALSE(hf.ok());
  EXPECT_THAT(std::string(hf.status().message()),
              testing::AllOf(HasSubstr("MixtralForCausalLM"),
                             HasSubstr("--moe_first_dense=1")));
  EXPECT_FALSE(fs::exists(dir + "/hf/config.json"));
  // A shared expert: neither Mixtral nor (with q/k norms) Qwen3-MoE has one.
  for (const bool qk_norm : {false, true}) {
    SCOPED_TRACE(qk_norm ? "Qwen3-MoE" : "Mixtral");
    const std::string name = qk_norm ? "/qwen3" : "/mixtral";
    state.model = TinyMixture();
    state.model.qk_norm = qk_norm;
    state.model.moe_shared_ffn_hidden = 8;
    SaveFresh(dir + name, state);
    hf = ConvertTo(dir + name, "hf", dir + name + "-hf");
    ASSERT_FALSE(hf.ok());
    EXPECT_THAT(std::string(hf.status().message()),
                testing::AllOf(HasSubstr(qk_norm ? "Qwen3MoeForCausalLM"
                                                 : "MixtralForCausalLM"),
                               HasSubstr("--moe_shared_ffn_hidden=8")));
  }
}

// A checkpoint trained with DeepSeek-V3's selection bias routes by it,
// which Mixtral and Qwen3-MoE cannot: --to=hf (and --to=shards, which
// carries weights only) refuse it rather than drop it; --to=trellis keeps
// it.
TEST(HfMixtralConvertTest, RefusesToDropTheExpertBias) {
  const std::string dir = test::Scratch();
  TrainingState state;
  state.model = TinyMixture();
  state.model.moe_bias_update_rate = 0.01;
  state.tokenizer = "byte";
  state.expert_bias = ExpertBias({{0.01, 0, 0, -0.01}, {0, 0.02, 0, 0}});
  SaveFresh(dir + "/a", state);
  for (const char* to : {"hf", "shards"}) {
    SCOPED_TRACE(to);
    absl::StatusOr<ConvertSummary> out =
        ConvertTo(dir + "/a", to, dir + "/" + to);
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()),
                testing::AllOf(HasSubstr("selection biases"),
                               HasSubstr("--to=trellis")));
  }
  EXPECT_FALSE(fs::exists(dir + "/hf/config.json"));
  ASSERT_TRUE(ConvertTo(dir + "/a", "trellis", dir + "/t").ok());
  absl::StatusOr<std::string> kept = ResolveResume(dir + "/t", "");
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<TrainingState> back = ReadTrainingState(*kept);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->expert_bias, state.expert_bias);
}

}  // namespace
}  // namespace trellis
