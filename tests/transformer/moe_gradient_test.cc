// The mixture-of-experts family (transformer/moe/): the MoE MLP's input,
// router and expert gradients, balance losses included, against central
// finite differences for each router kind, with and without a shared
// expert; the whole model's gradient (a dense layer before two MoE layers
// with shared experts); every recompute mode and
// deferred weight gradients equal the keep-everything path bit for bit;
// two pipeline stages equal one chunk; the parameter counts.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/kernels/elementwise.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "tests/framework/kernel_test_util.h"
#include "tests/transformer/parameter_gradient_check.h"
#include "tests/transformer/small_moe.h"
#include "transformer/decoder_chunk.h"
#include "transformer/llama/llama_parameters.h"
#include "transformer/model_family.h"
#include "transformer/moe/moe_family.h"
#include "transformer/moe/moe_parameters.h"

namespace trellis {
namespace {

using test::RandomTokens;
using test::SmallMoe;
using test::WidenRouters;

// (sigmoid scores, normalized weights, a shared expert)
class MoeMlpGradientTest
    : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(MoeMlpGradientTest, InputRouterAndExpertsMatchFiniteDifferences) {
  ModelConfig c = SmallMoe();
  c.moe_sigmoid = std::get<0>(GetParam());
  c.moe_norm_topk = std::get<1>(GetParam());
  c.moe_shared_ffn_hidden = std::get<2>(GetParam()) ? 20 : 0;
  c.moe_aux_loss_coeff = 0.3;
  c.moe_z_loss_coeff = 0.02;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  ParameterSet params;
  AddModelParameters(c, ChunkPlan{1, 1, false, false}, TpPlace{}, 77,
                     Device::Cpu(), DType::kF64, params);
  WidenRouters(c, params);
  const BlockParts parts = FamilyOf(c).NewBlockParts(c, 1, TpPlace{}, params);
  const BlockMlp& mlp = *parts.mlp;
  const int64_t n = 10;
  BlockTensors a;
  const SlotPlaces all{SlotPlace::kState, SlotPlace::kState, SlotPlace::kState};
  for (const Slot& s : mlp.Slots(n, DType::kF64, all)) {
    a.*s.member = Tensor::Empty(s.shape, s.dtype, Device::Cpu());
  }
  a.ln2 = kernel_test::Random({n, c.d_model}, 1);
  a.dy = kernel_test::Random({n, c.d_model}, 2);
  a.loss_scale = 0.7;
  Tensor out = Tensor::Empty({n, c.d_model}, DType::kF64);
  Tensor dln = Tensor::Empty({n, c.d_model}, DType::kF64);
  SelfCommunicator tp("tp");
  // The objective: dy · out plus the balance losses as training adds them.
  auto forward = [&] {
    mlp.Up(a);
    mlp.Down(a, out);
    const double* losses = a.route_losses.data<double>();
    return kernel_test::Dot(a.dy, out) +
           a.loss_scale * (c.moe_aux_loss_coeff * losses[0] +
                           c.moe_z_loss_coeff * losses[1]);
  };
  auto loss = [&] {
    const double value = forward();
    mlp.BackwardInput(tp, a, dln);
    std::vector<ColumnSumJob> jobs;
    mlp.WeightGradients(a, false, jobs);
    EXPECT_TRUE(jobs.empty());
    return value;
  };
  test::ExpectGradientsMatchFiniteDifferences(params, loss, 6);
  // The input gradient (written, not accumulated) at every element.
  loss();
  const Tensor analytic = dln.Clone();
  const double h = 1e-5;
  for (int64_t i = 0; i < a.ln2.numel(); ++i) {
    double& x = a.ln2.data<double>()[i];
    const double saved = x;
    x = saved + h;
    const double up = forward();
    x = saved - h;
    const double down = forward();
    x = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic.data<double>()[i], numeric,
                1e-7 + 1e-5 * std::abs(numeric))
        << "ln2[" << i << "]";
  }
  // Both experts of every token were used: nothing dropped.
  int64_t routed = 0;
  for (int64_t e = 0; e < c.experts; ++e) {
    routed += a.counts.data<int32_t>()[e];
  }
  EXPECT_EQ(routed, n * c.experts_per_token);
}

INSTANTIATE_TEST_SUITE_P(
    Routers, MoeMlpGradientTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<bool, bool, bool>>& info) {
      return std::string(std::get<0>(info.param) ? "Sigmoid" : "Softmax") +
             (std::get<1>(info.param) ? "Normalized" : "Raw") +
             (std::get<2>(info.param) ? "Shared" : "");
    });

// (recompute, defer weight gradients)
using Param = std::tuple<Recompute, bool>;
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const char* names[] = {"None", "Selective", "Full"};
  const auto [recompute, defer] = info.param;
  return std::string(names[static_cast<int>(recompute)]) +
         (defer ? "Deferred" : "Immediate");
}

class MoeGradientTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    config_ = SmallMoe();
    // Every MoE layer with a shared expert beside the routed ones.
    config_.moe_shared_ffn_hidden = 20;
    ASSERT_TRUE(config_.Validate().ok()) << config_.Validate();
    AddModelParameters(config_, plan_, TpPlace{}, /*seed=*/1234, Device::Cpu(),
                       DType::kF64, params_);
    WidenRouters(config_, params_);
    chunk_ = NewChunk(Options(), plan_, params_);
    tokens_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 1);
    targets_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 2);
  }

  BlockOptions Options() const {
    return BlockOptions{std::get<0>(GetParam()), std::get<1>(GetParam()),
                        kHeadRows};
  }
  std::unique_ptr<ModelChunk> NewChunk(const BlockOptions& options,
                                       const ChunkPlan& plan,
                                       ParameterSet& params) {
    ChunkSetup setup{plan,   TpPlace{},     &tp_,        &params,
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

  std::map<std::string, Tensor> Grads() const {
    std::map<std::string, Tensor> grads;
    for (Parameter* p : params_.all()) grads[p->name] = p->grad.Clone();
    return grads;
  }

  static constexpr int64_t kBatch = 2;
  static constexpr int64_t kHeadRows = 3;
  ModelConfig config_;
  ChunkPlan plan_{0, 3, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<ModelChunk> chunk_;
  Tensor tokens_, targets_;
};

TEST_P(MoeGradientTest, EveryParameterMatchesFiniteDifferences) {
  // Without balance losses the chunk's loss is the whole objective.
  test::ExpectGradientsMatchFiniteDifferences(
      params_, [&] { return Loss(); }, 4);
}

TEST_P(MoeGradientTest, GradientsEqualTheKeepEverythingModeBitForBit) {
  // With balance losses, which every mode adds at the same scale.
  config_.moe_aux_loss_coeff = 0.01;
  config_.moe_z_loss_coeff = 0.001;
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
    return std::make_pair(loss, Grads());
  };
  const std::unique_ptr<ModelChunk> reference =
      NewChunk(BlockOptions{Recompute::kNone, true, kHeadRows}, plan_, params_);
  const auto [want_loss, want] = run(*reference);
  chunk_ = NewChunk(Options(), plan_, params_);
  const auto [loss, got] = run(*chunk_);
  EXPECT_EQ(loss, want_loss);
  for (Parameter* p : params_.all()) {
    EXPECT_EQ(MaxRelativeDifference(got.at(p->name), want.at(p->name)), 0.0)
        << p->name;
  }
  // The balance losses reach the routers: their gradients differ from a
  // run without them.
  config_.moe_aux_loss_coeff = 0;
  config_.moe_z_loss_coeff = 0;
  chunk_ = NewChunk(Options(), plan_, params_);
  const auto [plain_loss, plain] = run(*chunk_);
  EXPECT_EQ(plain_loss, want_loss);
  const std::string router = RouterName(1);
  EXPECT_GT(MaxRelativeDifference(plain.at(router), want.at(router)), 1e-6);
}

TEST_P(MoeGradientTest, TwoStagesEqualOneChunk) {
  params_.ZeroGrads();
  const double want_loss = Loss();
  const std::map<std::string, Tensor> want = Grads();
  ParameterSet first_params, last_params;
  const ChunkPlan first{0, 2, true, false}, last{2, 1, false, true};
  for (auto [plan, set] :
       {std::pair{first, &first_params}, std::pair{last, &last_params}}) {
    AddModelParameters(config_, plan, TpPlace{}, 1234, Device::Cpu(),
                       DType::kF64, *set);
    WidenRouters(config_, *set);
  }
  auto first_chunk = NewChunk(Options(), first, first_params);
  auto last_chunk = NewChunk(Options(), last, last_params);
  const int64_t n = kBatch * config_.seq_len;
  Tensor hidden = Tensor::Empty({n, config_.d_model}, DType::kF64);
  Tensor dhidden = Tensor::Empty({n, config_.d_model}, DType::kF64);
  first_chunk->Forward(0, tokens_, Tensor(), Tensor(), 1.0, &hidden);
  last_chunk->Forward(0, Tensor(), hidden, targets_, 1.0, nullptr);
  EXPECT_NEAR(last_chunk->MeanLoss(0), want_loss, 1e-12);
  last_chunk->BackwardInput(0, Tensor(), &dhidden);
  last_chunk->BackwardWeight(0);
  first_chunk->BackwardInput(0, dhidden, nullptr);
  first_chunk->BackwardWeight(0);
  for (const auto& [name, grad] : want) {
    const Parameter* p = first_params.Find(name);
    if (p == nullptr) p = last_params.Find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_LT(MaxRelativeDifference(p->grad, grad, 1e-12), 1e-9) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, MoeGradientTest,
    ::testing::Combine(::testing::Values(Recompute::kNone,
                                         Recompute::kSelective,
                                         Recompute::kFull),
                       ::testing::Bool()),
    ParamName);

TEST(MoeParametersTest, CountsEveryExpertAndActivatesK) {
  const ModelConfig c = SmallMoe();
  int64_t declared = 0;
  for (const auto& [name, shape] : ModelTensorShapes(c)) {
    declared += NumElements(shape);
  }
  EXPECT_EQ(c.NumParameters(), declared);
  // Each MoE layer's router (C, E) and E experts of 3·C·Fe.
  const int64_t expert = 3 * 16 * 12;
  EXPECT_EQ(FamilyOf(c).ActiveParameters(c), declared - 2 * (4 - 2) * expert);
  EXPECT_EQ(MoeLayers(c), 2);
  EXPECT_FALSE(IsMoeLayer(c, 0));
  // A shared expert of width 20 in each MoE layer: always active.
  ModelConfig shared = c;
  shared.moe_shared_ffn_hidden = 20;
  EXPECT_EQ(shared.NumParameters(), declared + 2 * 3 * 16 * 20);
  EXPECT_EQ(FamilyOf(shared).ActiveParameters(shared),
            FamilyOf(c).ActiveParameters(c) + 2 * 3 * 16 * 20);
  ModelConfig every_other = c;
  every_other.moe_first_dense = 0;
  every_other.moe_layer_freq = 2;
  EXPECT_TRUE(IsMoeLayer(every_other, 0));
  EXPECT_FALSE(IsMoeLayer(every_other, 1));
  EXPECT_TRUE(IsMoeLayer(every_other, 2));
}

TEST(MoeParametersTest, RefusesBadExpertOptionsInOneLine) {
  struct Case {
    void (*set)(ModelConfig&);
    const char* flag;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.experts = 0; }, "--experts=0"},
      {[](ModelConfig& c) { c.experts_per_token = 5; },
       "--experts_per_token=5"},
      {[](ModelConfig& c) { c.moe_ffn_hidden = -1; }, "--moe_ffn_hidden=-1"},
      {[](ModelConfig& c) { c.moe_layer_freq = 0; }, "--moe_layer_freq=0"},
      {[](ModelConfig& c) { c.moe_aux_loss_coeff = -1; },
       "--moe_aux_loss_coeff=-1"},
      {[](ModelConfig& c) { c.moe_shared_ffn_hidden = -2; },
       "--moe_shared_ffn_hidden=-2"},
      {[](ModelConfig& c) { c.moe_bias_update_rate = -0.001; },
       "--moe_bias_update_rate=-0.001"},
      {[](ModelConfig& c) { c.moe_bias_update_rate = std::nan(""); },
       "--moe_bias_update_rate=nan"},
  };
  for (const Case& k : cases) {
    ModelConfig c = SmallMoe();
    k.set(c);
    const absl::Status status = c.Validate();
    EXPECT_FALSE(status.ok()) << k.flag;
    EXPECT_NE(status.message().find(k.flag), std::string::npos)
        << status.message();
    EXPECT_EQ(status.message().find('\n'), std::string::npos);
  }
  // tp 4 splits the heads but not experts 10 wide.
  ModelConfig c = SmallMoe();
  c.moe_ffn_hidden = 10;
  ASSERT_TRUE(FamilyOf(c).CheckTensorParallel(c, 2).ok());
  const absl::Status tp = FamilyOf(c).CheckTensorParallel(c, 4);
  EXPECT_NE(tp.message().find("expert width 10"), std::string::npos)
      << tp.message();
  c.moe_ffn_hidden = 12;
  c.moe_shared_ffn_hidden = 6;
  const absl::Status shared = FamilyOf(c).CheckTensorParallel(c, 4);
  EXPECT_NE(shared.message().find("shared expert width 6"), std::string::npos)
      << shared.message();
}

}  // namespace
}  // namespace trellis
