// Every family's chunk with document masks (ChunkMasks): doc_start keeps
// documents apart, loss weights drop targets from the mean; gradients match
// finite differences under every recompute mode. Double precision.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "framework/rng.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

constexpr int64_t kBatch = 2, kSeq = 8;

// GPT-2, or Llama with grouped-query attention (2 query heads per key/value
// head) and an untied head.
ModelConfig SmallConfig(ModelFamilyKind family) {
  ModelConfig c;
  c.family = family;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = kSeq;
  c.vocab_size = 13;
  if (family == ModelFamilyKind::kLlama) {
    c.n_head = 4;
    c.d_model = 16;
    c.n_kv_heads = 2;
    c.ffn_multiple_of = 8;
    c.tie_embeddings = false;
  }
  return c;
}

Tensor RandomTokens(uint64_t stream) {
  Tensor x = Tensor::Empty({kBatch, kSeq}, DType::kI32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(RandomBits(7, stream, i) % 13);
  }
  return x;
}

// Row 0: documents [0, 3) and [3, 8); row 1: [0, 1), [1, 6), [6, 8).
Tensor DocStarts() {
  const int32_t starts[] = {0, 0, 0, 3, 3, 3, 3, 3, 0, 1, 1, 1, 1, 1, 6, 6};
  Tensor s = Tensor::Empty({kBatch, kSeq}, DType::kI32);
  std::copy(std::begin(starts), std::end(starts), s.data<int32_t>());
  return s;
}

using Param = std::tuple<ModelFamilyKind, Recompute>;
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const char* recompute[] = {"None", "Selective", "Full"};
  const auto [family, mode] = info.param;
  return std::string(family == ModelFamilyKind::kLlama ? "Llama" : "Gpt2") +
         recompute[static_cast<int>(mode)];
}

class DecoderDocumentTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    config_ = SmallConfig(std::get<0>(GetParam()));
    ASSERT_TRUE(config_.Validate().ok()) << config_.Validate();
    AddModelParameters(config_, plan_, TpPlace{}, 99, Device::Cpu(),
                       DType::kF64, params_);
    ChunkSetup setup;
    setup.plan = plan_;
    setup.tp_comm = &tp_;
    setup.params = &params_;
    setup.micro_batch = kBatch;
    setup.device = Device::Cpu();
    setup.dtype = DType::kF64;
    setup.options.recompute = std::get<1>(GetParam());
    setup.options.loss_chunk_rows = 5;
    setup.options.document_mask = true;
    setup.options.eod_mask_loss = true;
    chunk_ = FamilyOf(config_).NewChunk(config_, setup);
    tokens_ = RandomTokens(1);
    targets_ = RandomTokens(2);
    // Targets 2 and 11 dropped, the rest weighing 16 / 14.
    weights_ = Tensor::Empty({kBatch, kSeq}, DType::kF32);
    for (int64_t i = 0; i < weights_.numel(); ++i) {
      weights_.data<float>()[i] = (i == 2 || i == 11) ? 0.0f : 16.0f / 14;
    }
  }

  // Trains one microbatch; returns its mean loss, leaves the gradients.
  double Loss(const Tensor& weights) {
    params_.ZeroGrads();
    chunk_->SetMasks({DocStarts(), weights});
    chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
    const double loss = chunk_->MeanLoss(0);
    chunk_->BackwardInput(0, Tensor(), nullptr);
    chunk_->BackwardWeight(0);
    return loss;
  }

  // Per-token losses without weights (an evaluation forward).
  std::vector<double> TokenLosses() {
    chunk_->SetMasks({DocStarts(), Tensor()});
    chunk_->Forward(0, tokens_, Tensor(), targets_, 0.0, nullptr);
    const Tensor& l = chunk_->TokenLosses(0);
    std::vector<double> out(l.data<double>(), l.data<double>() + l.numel());
    chunk_->Release(0);
    return out;
  }

  std::map<std::string, Tensor> Grads() {
    std::map<std::string, Tensor> g;
    for (Parameter* p : params_.all()) g[p->name] = p->grad.Clone();
    return g;
  }

  ModelConfig config_;
  ChunkPlan plan_{0, 2, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<ModelChunk> chunk_;
  Tensor tokens_, targets_, weights_;
};

TEST_P(DecoderDocumentTest, EveryParameterMatchesFiniteDifferences) {
  Loss(weights_);
  const std::map<std::string, Tensor> analytic = Grads();
  const double h = 1e-5;
  for (Parameter* p : params_.all()) {
    double* w = p->value.data<double>();
    const int64_t n = p->numel();
    for (int64_t k = 0; k < std::min<int64_t>(n, 5); ++k) {
      const int64_t i = k == 0 ? 0 : (k * 7919) % n;
      const double saved = w[i];
      w[i] = saved + h;
      const double up = Loss(weights_);
      w[i] = saved - h;
      const double down = Loss(weights_);
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic.at(p->name).data<double>()[i], numeric,
                  1e-7 + 1e-5 * std::abs(numeric))
          << p->name << "[" << i << "]";
    }
  }
}

// Changing an earlier document's tokens leaves a later document's losses
// as they were: attention does not cross the boundary.
TEST_P(DecoderDocumentTest, DocumentsDoNotSeeEachOther) {
  const std::vector<double> before = TokenLosses();
  tokens_.data<int32_t>()[1] = (tokens_.data<int32_t>()[1] + 5) % 13;
  tokens_.data<int32_t>()[8] = (tokens_.data<int32_t>()[8] + 3) % 13;
  const std::vector<double> after = TokenLosses();
  for (int64_t t : {3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15}) {
    EXPECT_NEAR(after[t], before[t], 1e-12) << "token " << t;
  }
  EXPECT_GT(std::abs(after[1] - before[1]), 1e-6);  // its own document
}

// The weighted mean is the mean over the kept targets, and a dropped
// target changes nothing, loss or gradient.
TEST_P(DecoderDocumentTest, DroppedTargetsLeaveTheMean) {
  const std::vector<double> losses = TokenLosses();
  double kept = 0;
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    if (i != 2 && i != 11) kept += losses[i];
  }
  const double loss = Loss(weights_);
  EXPECT_NEAR(loss, kept / 14, 1e-6 * kept / 14);  // weights are float32
  const std::map<std::string, Tensor> grads = Grads();
  targets_.data<int32_t>()[11] = (targets_.data<int32_t>()[11] + 1) % 13;
  EXPECT_EQ(Loss(weights_), loss);
  for (const auto& [name, g] : Grads()) {
    const Tensor& want = grads.at(name);
    for (int64_t i = 0; i < g.numel(); ++i) {
      ASSERT_EQ(g.data<double>()[i], want.data<double>()[i]) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    FamiliesAndRecompute, DecoderDocumentTest,
    ::testing::Combine(
        ::testing::Values(ModelFamilyKind::kGpt2, ModelFamilyKind::kLlama),
        ::testing::Values(Recompute::kNone, Recompute::kSelective,
                          Recompute::kFull)),
    ParamName);

}  // namespace
}  // namespace trellis
