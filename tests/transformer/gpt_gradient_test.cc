// The whole model's gradient against central finite differences, in double
// precision, and the invariants of its parameters. The LM head runs in
// uneven chunks of rows (kHeadRows), as the fused head does on long
// microbatches.
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "framework/host_sync.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "tests/transformer/parameter_gradient_check.h"
#include "transformer/decoder_block.h"
#include "transformer/decoder_chunk.h"
#include "transformer/gpt2/gpt2_parameters.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = 5;
  c.vocab_size = 13;
  return c;
}

using test::RandomTokens;

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
    AddModelParameters(config_, plan_, TpPlace{}, /*seed=*/1234, Device::Cpu(),
                       DType::kF64, params_);
    chunk_ = std::make_unique<DecoderChunk>(config_, plan_, TpPlace{}, tp_,
                                            params_, kBatch, Device::Cpu(),
                                            DType::kF64, Options(kHeadRows));
    tokens_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 1);
    targets_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 2);
  }

  // The mode under test with `head_rows` rows per head chunk.
  BlockOptions Options(int64_t head_rows) const {
    return BlockOptions{GetParam().recompute, GetParam().defer, head_rows};
  }

  double Loss() {
    chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
    const double loss = chunk_->MeanLoss(0);
    chunk_->BackwardInput(0, Tensor(), nullptr);
    chunk_->BackwardWeight(0);
    return loss;
  }

  static constexpr int64_t kBatch = 2;
  // N = kBatch · seq_len = 10 rows: head chunks of 3, 3, 3 and 1.
  static constexpr int64_t kHeadRows = 3;
  ModelConfig config_ = SmallConfig();
  ChunkPlan plan_{0, 2, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<DecoderChunk> chunk_;
  Tensor tokens_, targets_;
};

TEST_P(GptGradientTest, EveryParameterMatchesFiniteDifferences) {
  test::ExpectGradientsMatchFiniteDifferences(
      params_, [this] { return Loss(); }, 6);
}

TEST_P(GptGradientTest, LossStartsNearLogVocab) {
  const double loss = Loss();
  EXPECT_NEAR(loss, std::log(static_cast<double>(config_.vocab_size)), 0.3);
}

TEST_P(GptGradientTest, InitializationIsAFunctionOfNameAndIndexOnly) {
  // Rebuilding the parameters gives bit-identical values, and a different
  // seed gives different ones.
  ParameterSet again, other;
  AddModelParameters(config_, plan_, TpPlace{}, 1234, Device::Cpu(),
                     DType::kF64, again);
  AddModelParameters(config_, plan_, TpPlace{}, 99, Device::Cpu(), DType::kF64,
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
  chunk_->Forward(0, tokens_, Tensor(), targets_, 0.5, nullptr);
  chunk_->Forward(1, tokens1, Tensor(), targets_, 0.5, nullptr);
  EXPECT_EQ(chunk_->InFlight(), 2);
  chunk_->BackwardInput(1, Tensor(), nullptr);
  chunk_->BackwardInput(0, Tensor(), nullptr);
  chunk_->BackwardWeight(0);
  chunk_->BackwardWeight(1);
  std::map<std::string, Tensor> interleaved;
  for (Parameter* p : params_.all()) interleaved[p->name] = p->grad.Clone();

  params_.ZeroGrads();
  for (int mb = 0; mb < 2; ++mb) {
    chunk_->Forward(mb, mb == 0 ? tokens_ : tokens1, Tensor(), targets_, 0.5,
                    nullptr);
    chunk_->BackwardInput(mb, Tensor(), nullptr);
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
  auto run = [&](DecoderChunk& chunk) {
    Tensor tokens1 =
        RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
    params_.ZeroGrads();
    chunk.Forward(0, tokens_, Tensor(), targets_, 0.5, nullptr);
    chunk.Forward(1, tokens1, Tensor(), targets_, 0.5, nullptr);
    const double loss = chunk.MeanLoss(0) + chunk.MeanLoss(1);
    chunk.BackwardInput(0, Tensor(), nullptr);
    chunk.BackwardInput(1, Tensor(), nullptr);
    // Weight gradients in the input gradients' microbatch order, so that
    // every mode sums microbatches in the same order.
    chunk.BackwardWeight(0);
    chunk.BackwardWeight(1);
    std::map<std::string, Tensor> grads;
    for (Parameter* p : params_.all()) grads[p->name] = p->grad.Clone();
    return std::make_pair(loss, grads);
  };
  DecoderChunk reference(config_, plan_, TpPlace{}, tp_, params_, kBatch,
                         Device::Cpu(), DType::kF64,
                         BlockOptions{Recompute::kNone, true, kHeadRows});
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
    return DecoderChunk(config_, plan_, TpPlace{}, tp_, params_, kBatch,
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
  const DecoderBlock block(config_, 0, TpPlace{}, params_,
                           BlockOptions{GetParam().recompute, defer});
  const DecoderBlock::State state =
      block.NewState(kBatch, DType::kF64, Device::Cpu());
  const DecoderBlock::Workspace work =
      block.NewWorkspace(kBatch, DType::kF64, Device::Cpu());
  const DecoderBlock::Tensors& k = state.kept;
  const DecoderBlock::Tensors& w = work.shared;
  size_t state_bytes = state.y.nbytes(), work_bytes = work.datt.nbytes();
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

// Two microbatches in flight with `head_rows` rows per head chunk: the
// loss, the per-token losses and every gradient.
struct HeadRun {
  double loss = 0;
  std::vector<Tensor> token_losses;
  std::map<std::string, Tensor> grads;
};

TEST_P(GptGradientTest, ChunkedHeadMatchesTheWholeHead) {
  const Tensor tokens1 =
      RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
  auto run = [&](int64_t head_rows) {
    DecoderChunk chunk(config_, plan_, TpPlace{}, tp_, params_, kBatch,
                       Device::Cpu(), DType::kF64, Options(head_rows));
    params_.ZeroGrads();
    HeadRun r;
    chunk.Forward(0, tokens_, Tensor(), targets_, 0.5, nullptr);
    chunk.Forward(1, tokens1, Tensor(), targets_, 0.5, nullptr);
    r.loss = chunk.MeanLoss(0) + chunk.MeanLoss(1);
    r.token_losses = {chunk.TokenLosses(0).Clone(),
                      chunk.TokenLosses(1).Clone()};
    chunk.BackwardInput(0, Tensor(), nullptr);
    chunk.BackwardInput(1, Tensor(), nullptr);
    chunk.BackwardWeight(0);
    chunk.BackwardWeight(1);
    for (Parameter* p : params_.all()) r.grads[p->name] = p->grad.Clone();
    return r;
  };
  const HeadRun whole = run(0);  // all 10 rows at once
  for (int64_t head_rows : {1, 3, 4, 9, 64}) {
    SCOPED_TRACE(head_rows);
    const HeadRun chunked = run(head_rows);
    // Each row's loss only depends on its own logits. The BLAS may still
    // pick another kernel (and summation order) for a GEMM of fewer rows,
    // so "the same" is to float64 rounding, far below any real error (a
    // row in the wrong chunk or a skipped chunk changes losses at 1e-2).
    constexpr double kRounding = 1e-13;
    EXPECT_NEAR(chunked.loss, whole.loss, kRounding * std::abs(whole.loss));
    for (int mb = 0; mb < 2; ++mb) {
      EXPECT_LT(MaxRelativeDifference(chunked.token_losses[mb],
                                      whole.token_losses[mb]),
                kRounding);
    }
    // Every row's gradient is the same, and wte's sums the chunks'
    // products in another order: each to rounding of its largest element.
    for (Parameter* p : params_.all()) {
      const Tensor& want = whole.grads.at(p->name);
      const Tensor& got = chunked.grads.at(p->name);
      double largest = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        largest = std::max(largest, std::abs(want.data<double>()[i]));
      }
      EXPECT_LT(MaxRelativeDifference(got, want, largest), kRounding)
          << p->name;
    }
  }
}

TEST_P(GptGradientTest, EvaluationTouchesNoGradient) {
  // A forward without a loss scale computes the training forward's losses
  // and leaves every gradient as it was.
  for (Parameter* p : params_.all()) p->grad.Fill(0.25);
  chunk_->Forward(0, tokens_, Tensor(), targets_, 0.0, nullptr);
  const double eval = chunk_->MeanLoss(0);
  const Tensor eval_losses = chunk_->TokenLosses(0).Clone();
  chunk_->Release(0);
  for (Parameter* p : params_.all()) {
    const double* g = p->grad.data<double>();
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      ASSERT_EQ(g[i], 0.25) << p->name << "[" << i << "]";
    }
  }
  chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
  const double train = chunk_->MeanLoss(0);
  EXPECT_EQ(eval, train);
  EXPECT_EQ(MaxRelativeDifference(eval_losses, chunk_->TokenLosses(0)), 0.0);
  // The training forward alone already moved wte's gradient.
  EXPECT_NE(params_.Find("wte")->grad.data<double>()[0], 0.25);
  chunk_->BackwardInput(0, Tensor(), nullptr);
  chunk_->BackwardWeight(0);
}

TEST_P(GptGradientTest, ForwardAddsTheMeanLossOnTheDeviceWithoutReading) {
  // The microbatches' mean losses add up in `loss_sum`, exactly as the host
  // would add MeanLoss, and the forward itself makes no host wait.
  Tensor tokens1 = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 3);
  Tensor loss_sum = Tensor::Zeros({1}, DType::kF64);
  ResetHostWaits();
  chunk_->Forward(0, tokens_, Tensor(), targets_, 0.5, nullptr, &loss_sum);
  chunk_->Forward(1, tokens1, Tensor(), targets_, 0.5, nullptr, &loss_sum);
  EXPECT_EQ(HostWaits(), 0);
  const double want = chunk_->MeanLoss(0) + chunk_->MeanLoss(1);
  EXPECT_EQ(HostWaits(), 2);  // MeanLoss reads
  EXPECT_GT(want, 0.0);
  EXPECT_EQ(loss_sum.data<double>()[0], want);
  for (int mb = 0; mb < 2; ++mb) {
    chunk_->BackwardInput(mb, Tensor(), nullptr);
    chunk_->BackwardWeight(mb);
  }
}

TEST_P(GptGradientTest, StateAndWorkspaceBytesAreWhatTheChunkAllocates) {
  size_t before = StorageBytesLive(DeviceType::kCPU);
  DecoderChunk chunk(config_, plan_, TpPlace{}, tp_, params_, kBatch,
                     Device::Cpu(), DType::kF64, Options(kHeadRows));
  // Built, the chunk holds nothing yet: the trainer plans first.
  EXPECT_EQ(StorageBytesLive(DeviceType::kCPU), before);
  chunk.AllocateWorkspace();
  EXPECT_EQ(StorageBytesLive(DeviceType::kCPU) - before,
            chunk.WorkspaceBytes());
  before = StorageBytesLive(DeviceType::kCPU);
  chunk.Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
  EXPECT_EQ(StorageBytesLive(DeviceType::kCPU) - before, chunk.StateBytes());
  chunk.BackwardInput(0, Tensor(), nullptr);
  chunk.BackwardWeight(0);
}

TEST_P(GptGradientTest, LastChunkStateDoesNotGrowWithTheVocabulary) {
  // The head keeps no logits per microbatch: only its workspace, one head
  // chunk of logits, grows with the vocabulary.
  auto sizes = [&](int64_t vocab) {
    ModelConfig config = config_;
    config.vocab_size = vocab;
    ParameterSet params;
    AddModelParameters(config, plan_, TpPlace{}, 1234, Device::Cpu(),
                       DType::kF64, params);
    const DecoderChunk chunk(config, plan_, TpPlace{}, tp_, params, kBatch,
                             Device::Cpu(), DType::kF64, Options(kHeadRows));
    return std::make_tuple(chunk.StateBytes(), chunk.WorkspaceBytes(),
                           params.Find("wte")->value.dim(0));
  };
  const auto [small_state, small_work, small_rows] = sizes(13);
  const auto [large_state, large_work, large_rows] = sizes(5000);
  EXPECT_EQ(large_state, small_state);
  EXPECT_EQ(large_work - small_work,
            kHeadRows * (large_rows - small_rows) * sizeof(double));
}

INSTANTIATE_TEST_SUITE_P(Modes, GptGradientTest, ::testing::ValuesIn(kModes),
                         ModeName);

}  // namespace
}  // namespace trellis
