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

// Every recompute mode, with weight gradients deferred to BackwardWeight
// (zero-bubble schedules) or computed in BackwardInput.
struct Mode {
  Recompute recompute;
  bool defer;
};
std::string ModeName(const ::testing::TestParamInfo<Mode>& info) {
  const char* names[] = {"None", "Selective", "Full"};
  return std::string(names[static_cast<int>(info.param.recompute)]) +
         (info.param.defer ? "Deferred" : "Immediate");
}
const Mode kModes[] = {
    {Recompute::kNone, true},      {Recompute::kNone, false},
    {Recompute::kSelective, true}, {Recompute::kSelective, false},
    {Recompute::kFull, true},      {Recompute::kFull, false},
};

class GptGradientTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    AddGptParameters(config_, plan_, TpPlace{}, /*seed=*/1234, Device::Cpu(),
                     DType::kF64, params_);
    chunk_ = std::make_unique<GptChunk>(
        config_, plan_, TpPlace{}, tp_, params_, kBatch, Device::Cpu(),
        DType::kF64, BlockOptions{GetParam().recompute, GetParam().defer});
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

TEST_P(GptGradientTest, EveryParameterMatchesFiniteDifferences) {
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

TEST_P(GptGradientTest, LossStartsNearLogVocab) {
  const double loss = Loss();
  EXPECT_NEAR(loss, std::log(static_cast<double>(config_.vocab_size)), 0.3);
}

TEST_P(GptGradientTest, InitializationIsAFunctionOfNameAndIndexOnly) {
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

TEST_P(GptGradientTest, SeveralMicrobatchesInFlightMatchOneAtATime) {
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

TEST_P(GptGradientTest, GradientsEqualTheKeepEverythingModeBitForBit) {
  // Two microbatches in flight, as a pipeline runs them.
  auto run = [&](GptChunk& chunk) {
    Tensor tokens1 =
        RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
    params_.ZeroGrads();
    const double loss = chunk.Forward(0, tokens_, Tensor(), targets_, nullptr) +
                        chunk.Forward(1, tokens1, Tensor(), targets_, nullptr);
    chunk.BackwardInput(0, Tensor(), 0.5, nullptr);
    chunk.BackwardInput(1, Tensor(), 0.5, nullptr);
    // Weight gradients in the input gradients' microbatch order, so that
    // every mode sums microbatches in the same order.
    chunk.BackwardWeight(0);
    chunk.BackwardWeight(1);
    std::map<std::string, Tensor> grads;
    for (Parameter* p : params_.all()) grads[p->name] = p->grad.Clone();
    return std::make_pair(loss, grads);
  };
  GptChunk reference(config_, plan_, TpPlace{}, tp_, params_, kBatch,
                     Device::Cpu(), DType::kF64,
                     BlockOptions{Recompute::kNone, true});
  const auto [want_loss, want] = run(reference);
  const auto [loss, got] = run(*chunk_);
  EXPECT_EQ(loss, want_loss);
  for (Parameter* p : params_.all()) {
    EXPECT_EQ(MaxRelativeDifference(got.at(p->name), want.at(p->name)), 0.0)
        << p->name;
  }
}

TEST_P(GptGradientTest, StateBytesCountWhatTheModeKeeps) {
  // Per microbatch, selective recompute keeps less than none and full less
  // than selective; deferring weight gradients keeps more.
  auto bytes = [&](Recompute r, bool defer) {
    return GptChunk(config_, plan_, TpPlace{}, tp_, params_, kBatch,
                    Device::Cpu(), DType::kF64, BlockOptions{r, defer})
        .StateBytes();
  };
  const bool defer = GetParam().defer;
  EXPECT_GT(bytes(Recompute::kNone, defer),
            bytes(Recompute::kSelective, defer));
  EXPECT_GT(bytes(Recompute::kSelective, defer),
            bytes(Recompute::kFull, defer));
  EXPECT_GT(bytes(GetParam().recompute, true),
            bytes(GetParam().recompute, false));
  // A block's state is exactly what NewState allocates.
  const Block block(config_, 0, TpPlace{}, params_,
                    BlockOptions{GetParam().recompute, defer});
  const Block::State state = block.NewState(kBatch, DType::kF64, Device::Cpu());
  const Block::Workspace work =
      block.NewWorkspace(kBatch, DType::kF64, Device::Cpu());
  const Block::Tensors& k = state.kept;
  const Block::Tensors& w = work.shared;
  size_t state_bytes = state.y.nbytes(),
         work_bytes = work.dgelu.nbytes() + work.datt.nbytes();
  for (const Tensor* t : {&k.ln1, &k.mean1, &k.rstd1, &k.qkv, &k.att, &k.saved,
                          &k.x2, &k.ln2, &k.mean2, &k.rstd2, &k.fc, &k.gelu,
                          &k.dy, &k.dfc, &k.dln2, &k.dx2, &k.dqkv, &k.dln1}) {
    if (t->defined()) state_bytes += t->nbytes();
  }
  for (const Tensor* t : {&w.ln1, &w.mean1, &w.rstd1, &w.qkv, &w.att, &w.saved,
                          &w.x2, &w.ln2, &w.mean2, &w.rstd2, &w.fc, &w.gelu,
                          &w.dy, &w.dfc, &w.dln2, &w.dx2, &w.dqkv, &w.dln1}) {
    if (t->defined()) work_bytes += t->nbytes();
  }
  EXPECT_EQ(block.StateBytes(kBatch, DType::kF64, Device::Cpu()), state_bytes);
  EXPECT_EQ(block.WorkspaceBytes(kBatch, DType::kF64, Device::Cpu()),
            work_bytes);
}

INSTANTIATE_TEST_SUITE_P(Modes, GptGradientTest, ::testing::ValuesIn(kModes),
                         ModeName);

}  // namespace
}  // namespace trellis
