// The whole model's gradient against central finite differences, in double
// precision, and the invariants of its parameters.
#include <cmath>
#include <map>

#include "framework/rng.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "transformer/gpt_chunk.h"
#include "transformer/gpt_parameters.h"

namespace trellis {
namespace {

GptConfig SmallConfig() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = 5;
  c.vocab_size = 13;
  return c;
}

Tensor RandomTokens(int64_t b, int64_t t, int64_t vocab, uint64_t stream) {
  Tensor x = Tensor::Empty({b, t}, DType::kI32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] =
        static_cast<int32_t>(RandomBits(7, stream, i) % vocab);
  }
  return x;
}

class GptGradientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AddGptParameters(config_, plan_, TpPlace{}, /*seed=*/1234, Device::Cpu(),
                     DType::kF64, params_);
    chunk_ = std::make_unique<GptChunk>(config_, plan_, TpPlace{}, tp_, params_,
                                        kBatch, Device::Cpu(), DType::kF64);
    tokens_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 1);
    targets_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 2);
  }

  double Loss() {
    const double loss =
        chunk_->Forward(0, tokens_, Tensor(), targets_, nullptr);
    chunk_->BackwardInput(0, Tensor(), 1.0, nullptr);
    chunk_->BackwardWeight(0);
    return loss;
  }

  static constexpr int64_t kBatch = 2;
  GptConfig config_ = SmallConfig();
  ChunkPlan plan_{0, 2, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<GptChunk> chunk_;
  Tensor tokens_, targets_;
};

TEST_F(GptGradientTest, EveryParameterMatchesFiniteDifferences) {
  params_.ZeroGrads();
  Loss();
  std::map<std::string, Tensor> analytic;
  for (Parameter* p : params_.all()) analytic[p->name] = p->grad.Clone();

  const double h = 1e-5;
  for (Parameter* p : params_.all()) {
    double* w = p->value.data<double>();
    const int64_t n = p->numel();
    // Up to 6 elements spread over the tensor, always the first and last.
    for (int64_t k = 0; k < std::min<int64_t>(n, 6); ++k) {
      const int64_t i = k == 0 ? 0 : (k == 5 ? n - 1 : (k * 7919) % n);
      const double saved = w[i];
      w[i] = saved + h;
      const double up = Loss();
      w[i] = saved - h;
      const double down = Loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double exact = analytic[p->name].data<double>()[i];
      EXPECT_NEAR(exact, numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << p->name << "[" << i << "]";
    }
  }
}

TEST_F(GptGradientTest, LossStartsNearLogVocab) {
  const double loss = Loss();
  EXPECT_NEAR(loss, std::log(static_cast<double>(config_.vocab_size)), 0.3);
}

TEST_F(GptGradientTest, InitializationIsAFunctionOfNameAndIndexOnly) {
  // Rebuilding the parameters gives bit-identical values, and a different
  // seed gives different ones.
  ParameterSet again, other;
  AddGptParameters(config_, plan_, TpPlace{}, 1234, Device::Cpu(), DType::kF64,
                   again);
  AddGptParameters(config_, plan_, TpPlace{}, 99, Device::Cpu(), DType::kF64,
                   other);
  for (Parameter* p : params_.all()) {
    EXPECT_EQ(MaxRelativeDifference(p->value, again.Find(p->name)->value), 0.0)
        << p->name;
  }
  EXPECT_GT(MaxRelativeDifference(params_.Find("wte")->value,
                                  other.Find("wte")->value),
            0.1);
}

TEST_F(GptGradientTest, SeveralMicrobatchesInFlightMatchOneAtATime) {
  // Forward 0, forward 1, backward 1, backward 0 accumulates the same
  // gradient as running them one after the other.
  Tensor tokens1 = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
  params_.ZeroGrads();
  chunk_->Forward(0, tokens_, Tensor(), targets_, nullptr);
  chunk_->Forward(1, tokens1, Tensor(), targets_, nullptr);
  EXPECT_EQ(chunk_->InFlight(), 2);
  chunk_->BackwardInput(1, Tensor(), 0.5, nullptr);
  chunk_->BackwardInput(0, Tensor(), 0.5, nullptr);
  chunk_->BackwardWeight(0);
  chunk_->BackwardWeight(1);
  std::map<std::string, Tensor> interleaved;
  for (Parameter* p : params_.all()) interleaved[p->name] = p->grad.Clone();

  params_.ZeroGrads();
  for (int mb = 0; mb < 2; ++mb) {
    chunk_->Forward(mb, mb == 0 ? tokens_ : tokens1, Tensor(), targets_,
                    nullptr);
    chunk_->BackwardInput(mb, Tensor(), 0.5, nullptr);
    chunk_->BackwardWeight(mb);
  }
  for (Parameter* p : params_.all()) {
    EXPECT_LT(MaxRelativeDifference(p->grad, interleaved[p->name], 1e-12), 1e-9)
        << p->name;
  }
  EXPECT_EQ(chunk_->StatesAllocated(), 2);
}

}  // namespace
}  // namespace trellis
