// trellis-bench's flags resolved into a run: a preset's micro batch is its
// CPU one on the CPU and the one measured fastest on an 80 GB H100 on
// CUDA, a flag overrides either, and the default batch is four micro
// batches on CUDA.
#include "tools/bench/bench_config.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "transformer/model_family.h"

namespace trellis {
namespace {

BenchConfig Resolve(const std::string& device, const std::string& preset,
                    std::optional<int64_t> micro_batch = std::nullopt) {
  BenchFlags f;
  f.device = device;
  f.preset = preset;
  f.micro_batch_size = micro_batch;
  auto config = ResolveBenchConfig(f);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : BenchConfig{};
}

TEST(BenchConfigTest, PresetsTakeTheirDevicesMicroBatch) {
  EXPECT_EQ(Resolve("cpu", "gpt2-124m").train.micro_batch_size, 8);
  const BenchConfig cuda = Resolve("cuda", "gpt2-124m");
  EXPECT_EQ(cuda.train.micro_batch_size, 64);
  EXPECT_EQ(cuda.train.global_batch_size, 256);
  EXPECT_EQ(Resolve("cuda", "gpt2-350m").train.micro_batch_size, 64);
  EXPECT_EQ(Resolve("cuda", "gpt2-774m").train.micro_batch_size, 32);
  EXPECT_EQ(Resolve("cuda", "gpt2-1558m").train.micro_batch_size, 16);
  EXPECT_EQ(Resolve("cpu", "gpt2-1558m").train.micro_batch_size, 2);
  EXPECT_EQ(Resolve("cuda", "gpt2-124m", 8).train.micro_batch_size, 8);
  EXPECT_EQ(Resolve("cpu", "").train.micro_batch_size, 4);
}

// The Llama preset is configs/llama-3.2-1b.flags's shape at its context of
// 2048 on CUDA, with Llama 3's vocabulary.
TEST(BenchConfigTest, LlamaPresetTakesItsFamilysShape) {
  const BenchConfig cuda = Resolve("cuda", "llama-3.2-1b");
  const ModelConfig& m = cuda.train.model;
  EXPECT_EQ(m.family, ModelFamilyKind::kLlama);
  EXPECT_EQ(m.n_layer, 16);
  EXPECT_EQ(m.n_head, 32);
  EXPECT_EQ(m.kv_heads(), 8);
  EXPECT_EQ(m.d_model, 2048);
  EXPECT_EQ(m.LlamaFfnHidden(), 8192);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_TRUE(m.tie_embeddings);
  EXPECT_EQ(m.seq_len, 2048);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(cuda.train.micro_batch_size, 16);
  // 1.24B parameters, as Meta's model card gives.
  EXPECT_NEAR(static_cast<double>(m.NumParameters()), 1.2358e9, 1e6);
  EXPECT_EQ(Resolve("cpu", "llama-3.2-1b").train.model.seq_len, 256);
  EXPECT_EQ(Resolve("cuda", "gpt2-124m").train.model.family,
            ModelFamilyKind::kGpt2);
}

// The mixture-of-experts preset: OLMoE's manner at half its width and
// depth, every layer routed, its FLOPs counted on the active parameters.
TEST(BenchConfigTest, MixturePresetTakesItsExperts) {
  const BenchConfig cuda = Resolve("cuda", "moe-0.9b-a0.2b");
  const ModelConfig& m = cuda.train.model;
  EXPECT_EQ(m.family, ModelFamilyKind("moe"));
  EXPECT_EQ(m.n_layer, 16);
  EXPECT_EQ(m.d_model, 1024);
  EXPECT_EQ(m.experts, 32);
  EXPECT_EQ(m.experts_per_token, 4);
  EXPECT_EQ(m.moe_ffn_hidden, 512);
  EXPECT_EQ(m.moe_first_dense, 0);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.vocab_size, 50304);
  EXPECT_EQ(cuda.train.micro_batch_size, 32);
  EXPECT_NEAR(static_cast<double>(m.NumParameters()), 0.924e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(FamilyOf(m).ActiveParameters(m)), 0.22e9,
              0.005e9);
}

}  // namespace
}  // namespace trellis
