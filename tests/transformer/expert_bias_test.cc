// DeepSeek-V3's auxiliary-loss-free balancing (transformer/expert_bias.h):
// the update moves each expert's bias by the rate toward the mean load
// (and not at all at the mean); the table's checks name what is wrong; a
// row reaches the device rounded to its dtype. In a MoE chunk: a bias of
// zeros changes nothing, a large one sends every token to its expert
// without touching the weights' gradients (finite differences), and the
// biases are counted in the chunk's workspace.
#include "transformer/expert_bias.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "framework/kernels/elementwise.h"
#include "parallel/communicator.h"
#include "tests/transformer/parameter_gradient_check.h"
#include "tests/transformer/small_moe.h"
#include "transformer/decoder_chunk.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ExpertBiasTest, UpdateMovesEachExpertTowardTheMeanLoad) {
  ExpertBias bias;
  EXPECT_TRUE(bias.empty());
  // Layer 0 dense; layer 1's mean load is 5.
  bias.Update({{}, {10, 2, 5, 3}}, 0.25);
  EXPECT_FALSE(bias.empty());
  EXPECT_TRUE(bias.Row(0).empty());
  EXPECT_THAT(bias.rows()[1], ElementsAre(-0.25, 0.25, 0.0, 0.25));
  // Moves add up; the busiest expert keeps losing.
  bias.Update({{}, {9, 1, 6, 4}}, 0.25);
  EXPECT_THAT(bias.rows()[1], ElementsAre(-0.5, 0.5, -0.25, 0.5));
  // Even loads move nothing; a layer that did not route keeps its row.
  bias.Update({{}, {5, 5, 5, 5}}, 0.25);
  bias.Update({{}, {}}, 0.25);
  EXPECT_THAT(bias.rows()[1], ElementsAre(-0.5, 0.5, -0.25, 0.5));
  EXPECT_TRUE(bias.Row(7).empty());
}

TEST(ExpertBiasTest, CheckNamesTheMisfit) {
  EXPECT_TRUE(ExpertBias().Check(3, 4).ok());
  EXPECT_TRUE(ExpertBias({{}, {1, 2, 3, 4}, {}}).Check(3, 4).ok());
  EXPECT_THAT(ExpertBias({{}, {1, 2, 3, 4}}).Check(3, 4).message(),
              HasSubstr("2 layers' rows but the model has 3 layers"));
  EXPECT_THAT(ExpertBias({{}, {1, 2, 3}, {}}).Check(3, 4).message(),
              HasSubstr("layer 1 has 3 values but the model has 4 experts"));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THAT(ExpertBias({{}, {1, 2, inf, 4}, {}}).Check(3, 4).message(),
              HasSubstr("layer 1 holds inf"));
}

TEST(ExpertBiasTest, RowsReachTheTensorRoundedAndEmptyRowsAsZeros) {
  Tensor bias = Tensor::Empty({3}, DType::kBF16);
  const std::vector<double> row = {0.1, -2.0, 1.0 / 3.0};
  CopyExpertBiasRow(row, bias);
  Tensor wide = Tensor::Empty({3}, DType::kF64);
  Tensor back = Tensor::Empty({3}, DType::kF32);
  for (int i = 0; i < 3; ++i) wide.data<double>()[i] = row[i];
  Convert(wide, back);
  Tensor want = Tensor::Empty({3}, DType::kBF16);
  Convert(back, want);
  // Compared as the float32s they widen to.
  auto widened = [](const Tensor& t) {
    Tensor f = Tensor::Empty({3}, DType::kF32);
    Convert(t, f);
    return std::vector<float>(f.data<float>(), f.data<float>() + 3);
  };
  EXPECT_EQ(widened(bias), widened(want));
  EXPECT_NE(widened(bias)[0], 0.1f);  // rounded to bfloat16
  CopyExpertBiasRow({}, bias);
  EXPECT_THAT(widened(bias), ElementsAre(0.0f, 0.0f, 0.0f));
}

// The small mixture (tests/transformer/small_moe.h) at a bias rate.
ModelConfig SmallMoe(double rate) {
  ModelConfig c = test::SmallMoe();
  c.moe_bias_update_rate = rate;
  return c;
}

class ExpertBiasChunkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const double rate : {0.0, 0.01}) {
      ASSERT_TRUE(SmallMoe(rate).Validate().ok());
    }
    AddModelParameters(SmallMoe(0), plan_, TpPlace{}, /*seed=*/99,
                       Device::Cpu(), DType::kF64, params_);
    test::WidenRouters(SmallMoe(0), params_);
    tokens_ = test::RandomTokens(kBatch, 5, 13, 1);
    targets_ = test::RandomTokens(kBatch, 5, 13, 2);
  }

  std::unique_ptr<ModelChunk> Chunk(double rate) {
    const ModelConfig c = SmallMoe(rate);
    ChunkSetup setup{plan_,  TpPlace{},     &tp_,        &params_,
                     kBatch, Device::Cpu(), DType::kF64, BlockOptions{}};
    std::unique_ptr<ModelChunk> chunk = FamilyOf(c).NewChunk(c, setup);
    chunk->AllocateWorkspace();
    return chunk;
  }

  // Forward and backward of one microbatch (gradients add into params_).
  double Loss(ModelChunk& chunk) {
    chunk.Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
    const double loss = chunk.MeanLoss(0);
    chunk.BackwardInput(0, Tensor(), nullptr);
    chunk.BackwardWeight(0);
    return loss;
  }

  static constexpr int64_t kBatch = 2;
  const ChunkPlan plan_{0, 3, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  Tensor tokens_, targets_;
};

TEST_F(ExpertBiasChunkTest, ZerosChangeNothingAndALargeBiasTakesEveryToken) {
  std::unique_ptr<ModelChunk> plain = Chunk(0), biased = Chunk(0.01);
  const double want = Loss(*plain);
  EXPECT_EQ(Loss(*biased), want);
  plain->TakeRouting();
  biased->TakeRouting();
  // Expert 2 of layer 1 and expert 0 of layer 2 far ahead of the scores
  // (at most 1): every token's two choices include them.
  biased->SetExpertBias(ExpertBias({{}, {0, 0, 5, 0}, {5, 0, 0, 0}}));
  const double moved = Loss(*biased);
  EXPECT_GT(std::abs(moved - want), 1e-6);
  const std::vector<ModelChunk::LayerRouting> routing = biased->TakeRouting();
  ASSERT_EQ(routing.size(), 2u);
  const double tokens = kBatch * 5;
  EXPECT_EQ(routing[0].layer, 1);
  EXPECT_EQ(routing[0].expert_slots[2], tokens);
  EXPECT_EQ(routing[1].layer, 2);
  EXPECT_EQ(routing[1].expert_slots[0], tokens);
  // Back to zeros: the unbiased loss again.
  biased->SetExpertBias(ExpertBias());
  EXPECT_EQ(Loss(*biased), want);
  // The table's biases are the chunk's only extra bytes: two MoE layers
  // of 4 float64s.
  EXPECT_EQ(biased->WorkspaceBytes(), plain->WorkspaceBytes() + 2 * 4 * 8);
}

TEST_F(ExpertBiasChunkTest, GradientsUnderABiasMatchFiniteDifferences) {
  // The bias moves which experts a token reaches, never their weights:
  // the objective stays differentiable in every parameter.
  std::unique_ptr<ModelChunk> chunk = Chunk(0.01);
  chunk->SetExpertBias(
      ExpertBias({{}, {0.3, -0.2, 0.1, -0.4}, {-0.1, 0.2, 0.4, 0.0}}));
  test::ExpectGradientsMatchFiniteDifferences(
      params_, [&] { return Loss(*chunk); }, 6);
}

}  // namespace
}  // namespace trellis
