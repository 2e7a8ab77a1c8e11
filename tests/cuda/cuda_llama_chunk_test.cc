// A float32 Llama model (grouped-query attention, llama3 RoPE scaling,
// untied head), the same with Qwen3's per-head q/k norm and heads wider
// than d_model / n_head, and a mixture of experts on it (a dense layer,
// then 4 experts, 2 per token, both balance losses) and one in DeepSeek-V3's
// manner (sigmoid scores, a shared expert, a selection bias), on CUDA
// against the same model on the CPU: the
// loss and every parameter gradient of one forward and backward pass, with
// identical weights (initialization ignores the device) and tokens, under
// each recompute mode. Then the Qwen3 model in bfloat16 on CUDA against
// float32 on the CPU.
//
// Tolerances: loss 1e-5 relative; each gradient 1e-4 of its largest entry
// (float32 throughout; only the order of sums differs between backends).
// bfloat16: loss 1e-2 relative, the q/k norm weights' gradients 5e-2 (two
// layers of bfloat16 activations, float32 statistics and gradients).
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "framework/rng.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "tests/cuda/cuda_test_util.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

constexpr int64_t kBatch = 2;

// kDeepSeek: a mixture in DeepSeek-V3's manner: sigmoid scores, a shared
// expert, and a selection bias (set below) in place of the aux loss.
enum class Variant { kLlama, kQwen3, kMoe, kDeepSeek };

ModelConfig Config(Variant variant) {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  if (variant != Variant::kLlama) {
    c.qk_norm = true;
    c.head_dim = 24;
  }
  if (variant == Variant::kMoe || variant == Variant::kDeepSeek) {
    c.family = ModelFamilyKind("moe");
    c.experts = 4;
    c.experts_per_token = 2;
    c.moe_ffn_hidden = 48;
    c.moe_first_dense = 1;
    c.moe_aux_loss_coeff = 0.01;
    c.moe_z_loss_coeff = 0.001;
  }
  if (variant == Variant::kDeepSeek) {
    c.moe_sigmoid = true;
    c.moe_shared_ffn_hidden = 32;
    c.moe_aux_loss_coeff = 0;
    c.moe_bias_update_rate = 0.001;
  }
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_heads = 2;
  c.d_model = 64;
  c.seq_len = 64;
  c.vocab_size = 100;
  c.ffn_hidden = 96;
  c.rope_theta = 500000;
  c.rope_scaling = RopeScalingType::kLlama3;
  c.rope_original_max_positions = 32;
  c.tie_embeddings = false;
  return c;
}

Tensor Tokens(const ModelConfig& c, uint64_t stream) {
  Tensor x = Tensor::Empty({kBatch, c.seq_len}, DType::kI32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] =
        static_cast<int32_t>(RandomBits(11, stream, i) % c.vocab_size);
  }
  return x;
}

struct PassResult {
  double loss = 0;
  std::map<std::string, Tensor> grads;  // on the CPU
};

PassResult RunModel(Device device, Recompute recompute, Variant variant,
                    DType dtype = DType::kF32) {
  const ModelConfig config = Config(variant);
  const ChunkPlan plan{0, config.n_layer, true, true};
  ParameterSet params;
  AddModelParameters(config, plan, TpPlace{}, /*seed=*/1234, device, dtype,
                     params);
  SelfCommunicator tp("tp");
  BlockOptions options;
  options.recompute = recompute;
  options.loss_chunk_rows = 48;  // 128 rows in chunks of 48, 48 and 32
  const std::unique_ptr<ModelChunk> chunk = FamilyOf(config).NewChunk(
      config, ChunkSetup{plan, TpPlace{}, &tp, &params, kBatch, device, dtype,
                         options});
  // Layer 1's router: expert 3 favored, expert 0 held back.
  chunk->SetExpertBias(ExpertBias({{}, {-0.05, 0.01, 0.0, 0.04}}));
  const Tensor tokens = Tokens(config, 1), targets = Tokens(config, 2);
  PassResult run;
  params.ZeroGrads();
  chunk->Forward(0, tokens, Tensor(), targets, 1.0, nullptr);
  run.loss = chunk->MeanLoss(0);
  chunk->BackwardInput(0, Tensor(), nullptr);
  chunk->BackwardWeight(0);
  for (Parameter* p : params.all()) {
    run.grads[p->name] = p->grad.To(Device::Cpu());
  }
  return run;
}

double LargestOf(const Tensor& t) {
  double largest = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    largest = std::max(largest, std::abs(double{t.data<float>()[i]}));
  }
  return largest;
}

class CudaLlamaChunkTest : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaLlamaChunkTest, Float32ModelMatchesTheCpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Variant variant = GetParam();
  const PassResult cpu = RunModel(Device::Cpu(), Recompute::kNone, variant);
  for (Recompute recompute :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(static_cast<int>(recompute));
    const PassResult gpu = RunModel(cuda_test::Gpu(), recompute, variant);
    EXPECT_GT(cpu.loss, 0.5 * std::log(100.0));
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss);
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    for (const auto& [name, grad] : cpu.grads) {
      SCOPED_TRACE(name);
      const Tensor& other = gpu.grads.at(name);
      ASSERT_EQ(other.shape(), grad.shape());
      EXPECT_GT(LargestOf(grad), 0)
          << "a gradient that is all zeros tests nothing";
      EXPECT_LE(kernel_test::RelError(other, grad), 1e-4);
    }
  }
}

std::string VariantName(const ::testing::TestParamInfo<Variant>& info) {
  switch (info.param) {
    case Variant::kLlama:
      return "Llama";
    case Variant::kQwen3:
      return "Qwen3";
    case Variant::kMoe:
      return "Moe";
    case Variant::kDeepSeek:
      return "DeepSeek";
  }
  return "";
}

INSTANTIATE_TEST_SUITE_P(Families, CudaLlamaChunkTest,
                         ::testing::Values(Variant::kLlama, Variant::kQwen3,
                                           Variant::kMoe, Variant::kDeepSeek),
                         VariantName);

TEST(CudaQwen3ChunkTest, Bfloat16TracksTheFloat32Cpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const PassResult cpu =
      RunModel(Device::Cpu(), Recompute::kNone, Variant::kQwen3);
  const PassResult gpu = RunModel(cuda_test::Gpu(), Recompute::kNone,
                                  Variant::kQwen3, DType::kBF16);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-2 * cpu.loss);
  int norms = 0;
  for (const auto& [name, grad] : cpu.grads) {
    if (name.find("q_norm") == std::string::npos &&
        name.find("k_norm") == std::string::npos) {
      continue;
    }
    SCOPED_TRACE(name);
    ++norms;
    EXPECT_GT(LargestOf(grad), 0);
    EXPECT_LE(kernel_test::RelError(gpu.grads.at(name), grad), 5e-2);
  }
  EXPECT_GT(norms, 0) << "no q/k norm weight found";
}

}  // namespace
}  // namespace trellis
