// A float32 GPT-2 model on CUDA against the same model on the CPU: the
// loss and every parameter gradient of one forward and backward pass, with
// identical weights (initialization ignores the device) and tokens.
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
#include "transformer/decoder_block.h"
#include "transformer/decoder_chunk.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

constexpr int64_t kBatch = 2;

ModelConfig Config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 64;
  c.seq_len = 64;
  c.vocab_size = 100;
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

// One model on one device: loss and gradients of a pass.
struct PassResult {
  double loss = 0;
  std::map<std::string, Tensor> grads;  // on the CPU
};

PassResult RunModel(Device device, int passes) {
  const ModelConfig config = Config();
  const ChunkPlan plan{0, config.n_layer, true, true};
  ParameterSet params;
  AddModelParameters(config, plan, TpPlace{}, /*seed=*/1234, device,
                     DType::kF32, params);
  SelfCommunicator tp("tp");
  // 128 rows in head chunks of 48, 48 and 32.
  BlockOptions options;
  options.loss_chunk_rows = 48;
  DecoderChunk chunk(config, plan, TpPlace{}, tp, params, kBatch, device,
                     DType::kF32, options);
  const Tensor tokens = Tokens(config, 1), targets = Tokens(config, 2);
  PassResult run;
  for (int pass = 0; pass < passes; ++pass) {  // later passes reuse state
    params.ZeroGrads();
    chunk.Forward(0, tokens, Tensor(), targets, 1.0, nullptr);
    run.loss = chunk.MeanLoss(0);
    chunk.BackwardInput(0, Tensor(), nullptr);
    chunk.BackwardWeight(0);
  }
  for (Parameter* p : params.all()) {
    run.grads[p->name] = p->grad.To(Device::Cpu());
  }
  return run;
}

TEST(CudaGptTest, Float32ModelMatchesTheCpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const PassResult cpu = RunModel(Device::Cpu(), 1);
  const PassResult gpu = RunModel(cuda_test::Gpu(), 2);
  EXPECT_GT(cpu.loss, 0.5 * std::log(100.0));  // a real loss, near log(V)
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

TEST(CudaGptTest, PassesRepeatBitwise) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const PassResult once = RunModel(cuda_test::Gpu(), 1);
  const PassResult twice = RunModel(cuda_test::Gpu(), 2);
  EXPECT_EQ(once.loss, twice.loss);
  // wte's gradient gathers the embedding's atomic adds; the rest are sums
  // in a fixed order.
  for (const auto& [name, grad] : once.grads) {
    if (name == "wte") continue;
    const Tensor& other = twice.grads.at(name);
    for (int64_t i = 0; i < grad.numel(); ++i) {
      ASSERT_EQ(grad.data<float>()[i], other.data<float>()[i])
          << name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace trellis
