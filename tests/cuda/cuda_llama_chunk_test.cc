// A float32 Llama model (grouped-query attention, llama3 RoPE scaling,
// untied head) on CUDA against the same model on the CPU: the loss and
// every parameter gradient of one forward and backward pass, with identical
// weights (initialization ignores the device) and tokens, under each
// recompute mode.
//
// Tolerances: loss 1e-5 relative; each gradient 1e-4 of its largest entry
// (float32 throughout; only the order of sums differs between backends).
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

ModelConfig Config() {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
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

PassResult RunModel(Device device, Recompute recompute) {
  const ModelConfig config = Config();
  const ChunkPlan plan{0, config.n_layer, true, true};
  ParameterSet params;
  AddModelParameters(config, plan, TpPlace{}, /*seed=*/1234, device,
                     DType::kF32, params);
  SelfCommunicator tp("tp");
  BlockOptions options;
  options.recompute = recompute;
  options.loss_chunk_rows = 48;  // 128 rows in chunks of 48, 48 and 32
  const std::unique_ptr<ModelChunk> chunk = FamilyOf(config).NewChunk(
      config, ChunkSetup{plan, TpPlace{}, &tp, &params, kBatch, device,
                         DType::kF32, options});
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

TEST(CudaLlamaChunkTest, Float32ModelMatchesTheCpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const PassResult cpu = RunModel(Device::Cpu(), Recompute::kNone);
  for (Recompute recompute :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(static_cast<int>(recompute));
    const PassResult gpu = RunModel(cuda_test::Gpu(), recompute);
    EXPECT_GT(cpu.loss, 0.5 * std::log(100.0));
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * cpu.loss);
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    for (const auto& [name, grad] : cpu.grads) {
      SCOPED_TRACE(name);
      const Tensor& other = gpu.grads.at(name);
      ASSERT_EQ(other.shape(), grad.shape());
      double largest = 0;
      for (int64_t i = 0; i < grad.numel(); ++i) {
        largest = std::max(largest, std::abs(double{grad.data<float>()[i]}));
      }
      EXPECT_GT(largest, 0) << "a gradient that is all zeros tests nothing";
      EXPECT_LE(kernel_test::RelError(other, grad), 1e-4);
    }
  }
}

}  // namespace
}  // namespace trellis
