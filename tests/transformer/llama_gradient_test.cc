// The whole Llama model's gradient against central finite differences, in
// double precision, for grouped-query and multi-head attention with a tied
// or untied head, and Qwen3's attention (a per-head q/k norm, heads wider
// than d_model / n_head); every recompute mode and deferred weight gradients
// equal the keep-everything path bit for bit; the block's memory accounting.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "framework/kernels/elementwise.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "tests/transformer/parameter_gradient_check.h"
#include "transformer/decoder_block.h"
#include "transformer/decoder_chunk.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

enum class Shape3 { kMhaTied, kGqaUntied, kQwen3 };

// MHA (tied, plain RoPE); GQA (2 key/value heads for 4 query heads, llama3
// RoPE scaling, untied); or that GQA with Qwen3's q/k norm and heads 6 wide
// (24 channels of attention in a 16-wide model).
ModelConfig SmallLlama(Shape3 shape) {
  ModelConfig c;
  c.family = ModelFamilyKind::kLlama;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 16;
  c.seq_len = 5;
  c.vocab_size = 13;
  c.ffn_multiple_of = 8;  // 2·4·16/3 = 42 -> 48
  c.norm_eps = 1e-6;
  if (shape != Shape3::kMhaTied) {
    c.n_kv_heads = 2;
    c.tie_embeddings = false;
    c.rope_scaling = RopeScalingType::kLlama3;
    c.rope_factor = 2.0;
    c.rope_original_max_positions = 4;
  }
  if (shape == Shape3::kQwen3) {
    c.qk_norm = true;
    c.head_dim = 6;
  }
  return c;
}

using test::RandomTokens;

// (recompute, defer weight gradients, attention)
using Param = std::tuple<Recompute, bool, Shape3>;
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const char* names[] = {"None", "Selective", "Full"};
  const char* shapes[] = {"MhaTied", "GqaUntied", "Qwen3"};
  const auto [recompute, defer, shape] = info.param;
  return std::string(names[static_cast<int>(recompute)]) +
         (defer ? "Deferred" : "Immediate") + shapes[static_cast<int>(shape)];
}

class LlamaGradientTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    config_ = SmallLlama(std::get<2>(GetParam()));
    ASSERT_TRUE(config_.Validate().ok()) << config_.Validate();
    AddModelParameters(config_, plan_, TpPlace{}, /*seed=*/1234, Device::Cpu(),
                       DType::kF64, params_);
    chunk_ = NewChunk(Options());
    tokens_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 1);
    targets_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 2);
  }

  BlockOptions Options() const {
    return BlockOptions{std::get<0>(GetParam()), std::get<1>(GetParam()),
                        kHeadRows};
  }
  std::unique_ptr<ModelChunk> NewChunk(const BlockOptions& options) {
    ChunkSetup setup{plan_,  TpPlace{},     &tp_,        &params_,
                     kBatch, Device::Cpu(), DType::kF64, options};
    return FamilyOf(config_).NewChunk(config_, setup);
  }

  double Loss() {
    chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
    const double loss = chunk_->MeanLoss(0);
    chunk_->BackwardInput(0, Tensor(), nullptr);
    chunk_->BackwardWeight(0);
    return loss;
  }

  static constexpr int64_t kBatch = 2;
  static constexpr int64_t kHeadRows = 3;
  ModelConfig config_;
  ChunkPlan plan_{0, 2, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<ModelChunk> chunk_;
  Tensor tokens_, targets_;
};

TEST_P(LlamaGradientTest, EveryParameterMatchesFiniteDifferences) {
  test::ExpectGradientsMatchFiniteDifferences(
      params_, [this] { return Loss(); }, 6);
}

TEST_P(LlamaGradientTest, DeclaresTheHeadAsConfigured) {
  const bool tied = config_.tie_embeddings;
  EXPECT_EQ(params_.Find(kLlamaHead) != nullptr, !tied);
  EXPECT_EQ(FamilyOf(config_).TiedEmbedding(config_),
            tied ? std::string(kLlamaEmbedding) : std::string());
  EXPECT_EQ(params_.Find("wpe"), nullptr);
  const Parameter* qkv =
      params_.Find(LlamaLayerName(0, "self_attn.qkv_proj.weight"));
  ASSERT_NE(qkv, nullptr);
  const int64_t d = config_.HeadDim();
  EXPECT_EQ(qkv->spec.logical_shape,
            (Shape{16, (4 + 2 * config_.kv_heads()) * d}));
  EXPECT_EQ(params_.Find(LlamaLayerName(0, "self_attn.o_proj.weight"))
                ->spec.logical_shape,
            (Shape{4 * d, 16}));
  for (const char* norm :
       {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
    const Parameter* p = params_.Find(LlamaLayerName(1, norm));
    ASSERT_EQ(p != nullptr, config_.qk_norm) << norm;
    if (p != nullptr) {
      EXPECT_EQ(p->spec.logical_shape, (Shape{d}));
    }
  }
  EXPECT_EQ(params_.Find(LlamaLayerName(1, "mlp.gate_up_proj.weight"))
                ->spec.logical_shape,
            (Shape{16, 96}));
  EXPECT_NEAR(Loss(), std::log(static_cast<double>(config_.vocab_size)), 0.3);
}

TEST_P(LlamaGradientTest, GradientsEqualTheKeepEverythingModeBitForBit) {
  auto run = [&](ModelChunk& chunk) {
    const Tensor tokens1 =
        RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
    params_.ZeroGrads();
    chunk.Forward(0, tokens_, Tensor(), targets_, 0.5, nullptr);
    chunk.Forward(1, tokens1, Tensor(), targets_, 0.5, nullptr);
    const double loss = chunk.MeanLoss(0) + chunk.MeanLoss(1);
    chunk.BackwardInput(0, Tensor(), nullptr);
    chunk.BackwardInput(1, Tensor(), nullptr);
    chunk.BackwardWeight(0);
    chunk.BackwardWeight(1);
    std::map<std::string, Tensor> grads;
    for (Parameter* p : params_.all()) grads[p->name] = p->grad.Clone();
    return std::make_pair(loss, grads);
  };
  const std::unique_ptr<ModelChunk> reference =
      NewChunk(BlockOptions{Recompute::kNone, true, kHeadRows});
  const auto [want_loss, want] = run(*reference);
  const auto [loss, got] = run(*chunk_);
  EXPECT_EQ(loss, want_loss);
  for (Parameter* p : params_.all()) {
    EXPECT_EQ(MaxRelativeDifference(got.at(p->name), want.at(p->name)), 0.0)
        << p->name;
  }
}

TEST_P(LlamaGradientTest, TwoStagesEqualOneChunk) {
  // The model cut after its first layer, as two pipeline stages: the same
  // loss and gradients (the tied embedding's from both ends summed).
  params_.ZeroGrads();
  chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
  const double want_loss = chunk_->MeanLoss(0);
  chunk_->BackwardInput(0, Tensor(), nullptr);
  chunk_->BackwardWeight(0);
  std::map<std::string, Tensor> want;
  for (Parameter* p : params_.all()) want[p->name] = p->grad.Clone();

  ParameterSet first_params, last_params;
  const ChunkPlan first{0, 1, true, false}, last{1, 1, false, true};
  AddModelParameters(config_, first, TpPlace{}, 1234, Device::Cpu(),
                     DType::kF64, first_params);
  AddModelParameters(config_, last, TpPlace{}, 1234, Device::Cpu(), DType::kF64,
                     last_params);
  const ModelFamily& family = FamilyOf(config_);
  auto first_chunk = family.NewChunk(
      config_, ChunkSetup{first, TpPlace{}, &tp_, &first_params, kBatch,
                          Device::Cpu(), DType::kF64, Options()});
  auto last_chunk = family.NewChunk(
      config_, ChunkSetup{last, TpPlace{}, &tp_, &last_params, kBatch,
                          Device::Cpu(), DType::kF64, Options()});
  const int64_t n = kBatch * config_.seq_len;
  Tensor hidden = Tensor::Empty({n, config_.d_model}, DType::kF64);
  Tensor dhidden = Tensor::Empty({n, config_.d_model}, DType::kF64);
  first_chunk->Forward(0, tokens_, Tensor(), Tensor(), 0, &hidden);
  last_chunk->Forward(0, Tensor(), hidden, targets_, 1.0, nullptr);
  EXPECT_NEAR(last_chunk->MeanLoss(0), want_loss, 1e-12);
  last_chunk->BackwardInput(0, Tensor(), &dhidden);
  last_chunk->BackwardWeight(0);
  first_chunk->BackwardInput(0, dhidden, nullptr);
  first_chunk->BackwardWeight(0);
  for (const auto& [name, grad] : want) {
    Tensor sum = Tensor::Zeros(grad.shape(), DType::kF64);
    int holders = 0;
    for (ParameterSet* set : {&first_params, &last_params}) {
      if (const Parameter* p = set->Find(name)) {
        Axpy(1.0, p->grad, sum);
        ++holders;
      }
    }
    EXPECT_EQ(holders,
              name == kLlamaEmbedding && config_.tie_embeddings ? 2 : 1)
        << name;
    EXPECT_LT(MaxRelativeDifference(sum, grad, 1e-12), 1e-9) << name;
  }
}

TEST_P(LlamaGradientTest, StateBytesCountWhatTheBlockAllocates) {
  const DecoderBlock block(config_, 0, TpPlace{}, params_, Options());
  const DecoderBlock::State state =
      block.NewState(kBatch, DType::kF64, Device::Cpu());
  const DecoderBlock::Workspace work =
      block.NewWorkspace(kBatch, DType::kF64, Device::Cpu());
  size_t state_bytes = state.y.nbytes(), work_bytes = work.datt.nbytes();
  auto add = [](const DecoderBlock::Tensors& t, size_t& bytes) {
    for (const Tensor* x :
         {&t.ln1,   &t.mean1, &t.rstd1, &t.qkv,   &t.att,     &t.saved,
          &t.x2,    &t.ln2,   &t.mean2, &t.rstd2, &t.fc,      &t.gelu,
          &t.dy,    &t.dfc,   &t.dln2,  &t.dx2,   &t.dqkv,    &t.dln1,
          &t.dgelu, &t.cos,   &t.sin,   &t.qk_in, &t.qk_rstd, &t.dqk_weight}) {
      if (x->defined()) bytes += x->nbytes();
    }
  };
  add(state.kept, state_bytes);
  add(work.shared, work_bytes);
  EXPECT_EQ(block.StateBytes(kBatch, DType::kF64, Device::Cpu()), state_bytes);
  EXPECT_EQ(block.WorkspaceBytes(kBatch, DType::kF64, Device::Cpu()),
            work_bytes);
  EXPECT_FALSE(state.kept.mean1.defined());  // RMSNorm keeps no mean
  EXPECT_TRUE(work.shared.cos.defined());
}

INSTANTIATE_TEST_SUITE_P(
    Modes, LlamaGradientTest,
    ::testing::Combine(::testing::Values(Recompute::kNone,
                                         Recompute::kSelective,
                                         Recompute::kFull),
                       ::testing::Bool(),
                       ::testing::Values(Shape3::kMhaTied, Shape3::kGqaUntied,
                                         Shape3::kQwen3)),
    ParamName);

}  // namespace
}  // namespace trellis
