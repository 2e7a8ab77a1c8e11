// A third model family built from the seam alone (model_family.h,
// block_parts.h): its own norm, MLP and position hooks, config rules,
// parameters and Hugging Face table, registered at run time, with no code
// of GPT-2's or Llama's. Its whole model's gradient matches central finite
// differences, and a model cut into two pipeline stages computes the same
// loss and gradients as the whole one.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/matmul.h"
#include "framework/kernels/rmsnorm.h"
#include "framework/kernels/rope.h"
#include "framework/rng.h"
#include "gtest/gtest.h"
#include "parallel/communicator.h"
#include "tests/transformer/parameter_gradient_check.h"
#include "transformer/block_parts.h"
#include "transformer/decoder_chunk.h"
#include "transformer/model_family.h"
#include "transformer/parameter_adder.h"

namespace trellis {
namespace {

constexpr ModelFamilyKind kToy{"toy"};

// RMSNorm with a fixed epsilon.
class ToyNorm : public BlockNorm {
 public:
  explicit ToyNorm(Parameter& w) : w_(w) {}
  std::vector<Parameter*> parameters() const override { return {&w_}; }
  bool has_mean() const override { return false; }
  void Forward(const Tensor& x, Tensor& out, Tensor&,
               Tensor& rstd) const override {
    RmsNormForward(x, w_.value, kEps, out, rstd);
  }
  void AddForward(const Tensor& a, const Tensor& b, Tensor& sum, Tensor& out,
                  Tensor&, Tensor& rstd) const override {
    AddRmsNormForward(a, b, w_.value, kEps, sum, out, rstd);
  }
  void BackwardInput(const Tensor& dout, const Tensor& x, const Tensor&,
                     const Tensor& rstd, Tensor& dx) const override {
    RmsNormBackwardInput(dout, x, w_.value, rstd, dx);
  }
  void BackwardInputResidual(const Tensor& dout, const Tensor& x, const Tensor&,
                             const Tensor& rstd, const Tensor& dres,
                             Tensor& dx) const override {
    RmsNormBackwardInputResidual(dout, x, w_.value, rstd, dres, dx);
  }
  void BackwardWeight(const Tensor& dout, const Tensor& x, const Tensor&,
                      const Tensor& rstd) const override {
    RmsNormBackwardWeight(dout, x, rstd, w_.grad);
  }
  void BlockWeightGradients(const Tensor& dout, const Tensor& x,
                            const Tensor& mean, const Tensor& rstd,
                            std::vector<ColumnSumJob>&) const override {
    BackwardWeight(dout, x, mean, rstd);
  }

 private:
  static constexpr double kEps = 1e-6;
  Parameter& w_;
};

// A bias-free GELU MLP two model widths wide.
class ToyMlp : public BlockMlp {
 public:
  ToyMlp(int64_t width, Parameter& up, Parameter& down)
      : width_(width), up_w_(up), down_w_(down), up_(up), down_(down) {}
  std::vector<Parameter*> parameters() const override {
    return {&up_w_, &down_w_};
  }
  std::vector<Slot> Slots(int64_t n, DType dtype,
                          SlotPlaces places) const override {
    return {{&BlockTensors::fc, {n, width_}, dtype, places.input},
            {&BlockTensors::gelu, {n, width_}, dtype, places.cheap},
            {&BlockTensors::dfc, {n, width_}, dtype, places.grad}};
  }
  void Up(BlockTensors& a) const override {
    const int64_t n = a.ln2.dim(0);
    Tensor fc = a.fc.Narrow(0, n), act = a.gelu.Narrow(0, n);
    up_.ForwardGelu(a.ln2, fc, act);
  }
  void Activation(const Tensor& fc, Tensor& act) const override {
    GeluForward(fc, act);
  }
  const RowParallelLinear* down() const override { return &down_; }
  void BackwardInput(Communicator&, BlockTensors& a,
                     Tensor& dln) const override {
    MatmulBackwardInputGelu(a.dy, down_w_.value, a.fc, a.dfc);
    MatmulBackwardInput(a.dfc, up_w_.value, dln, WeightLayout::kInOut,
                        GradWrite::kWrite);
  }
  void WeightGradients(const BlockTensors& a, bool,
                       std::vector<ColumnSumJob>&) const override {
    Tensor no_bias;
    MatmulBackwardWeight(a.dy, a.gelu, down_w_.grad, no_bias);
    MatmulBackwardWeight(a.dfc, a.ln2, up_w_.grad, no_bias);
  }

 private:
  int64_t width_;
  Parameter& up_w_;
  Parameter& down_w_;
  ColumnParallelLinear up_;
  RowParallelLinear down_;
};

// Rotary positions of a short base.
class ToyPositions : public BlockPositions {
 public:
  ToyPositions(int64_t heads, int64_t head_dim)
      : heads_(heads), head_dim_(head_dim) {}
  std::vector<Slot> Slots(int64_t seq_len, DType dtype, Device) const override {
    const Shape shape = {seq_len, head_dim_ / 2};
    return {{&BlockTensors::cos, shape, dtype, SlotPlace::kWorkspace},
            {&BlockTensors::sin, shape, dtype, SlotPlace::kWorkspace}};
  }
  void FillTables(int64_t seq_len, BlockTensors& t) const override {
    absl::StatusOr<RopeTables> tables =
        RopeTable(head_dim_, seq_len, 100.0, RopeScaling{}, t.cos.dtype());
    ASSERT_TRUE(tables.ok()) << tables.status();
    t.cos.CopyFrom(tables->cos);
    t.sin.CopyFrom(tables->sin);
  }
  void FillTablesAt(const std::vector<int32_t>& positions,
                    BlockTensors& t) const override {
    const int32_t last = *std::max_element(positions.begin(), positions.end());
    absl::StatusOr<RopeTables> tables =
        RopeTable(head_dim_, last + 1, 100.0, RopeScaling{}, t.cos.dtype());
    ASSERT_TRUE(tables.ok()) << tables.status();
    for (size_t i = 0; i < positions.size(); ++i) {
      t.cos.Narrow(i, 1).CopyFrom(tables->cos.Narrow(positions[i], 1));
      t.sin.Narrow(i, 1).CopyFrom(tables->sin.Narrow(positions[i], 1));
    }
  }
  void Forward(Tensor& qkv, int64_t first,
               const BlockTensors& t) const override {
    RopeForward(qkv, heads_, heads_, t.cos.Narrow(first, qkv.dim(1)),
                t.sin.Narrow(first, qkv.dim(1)));
  }
  void Backward(Tensor& dqkv, const BlockTensors& t) const override {
    RopeBackward(dqkv, heads_, heads_, t.cos, t.sin);
  }

 private:
  int64_t heads_, head_dim_;
};

std::string LayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("layers.", layer, ".", suffix);
}

class ToyFamily : public ModelFamily {
 public:
  ModelFamilyKind kind() const override { return kToy; }
  absl::Status Validate(const ModelConfig& c) const override {
    if (c.d_model % c.n_head != 0 || c.HeadDim() % 2 != 0) {
      return absl::InvalidArgumentError("toy: an even head size");
    }
    return absl::OkStatus();
  }
  absl::Status CheckTensorParallel(const ModelConfig& c,
                                   int64_t tp) const override {
    return c.n_head % tp == 0
               ? absl::OkStatus()
               : absl::InvalidArgumentError("toy: tp divides the heads");
  }
  std::string TiedEmbedding(const ModelConfig&) const override {
    return "embed";
  }
  void DeclareParameters(const ModelConfig& config, const ChunkPlan& plan,
                         TpPlace tp, uint64_t seed, Device device, DType dtype,
                         ParameterSet& params) const override {
    ParameterAdder add{params, tp, seed, device, dtype};
    const int64_t c = config.d_model;
    if ((plan.has_embedding || plan.has_head) && !params.Find("embed")) {
      add.Vocab("embed", config.vocab_size, c, 0.02).primary =
          plan.has_embedding;
    } else if (plan.has_embedding) {
      params.Find("embed")->primary = true;
    }
    for (int64_t l = plan.first_layer; l < plan.first_layer + plan.num_layers;
         ++l) {
      add.Replicated(LayerName(l, "norm1.weight"), {c}, false, 0, 1.0);
      add.ColumnGroups(LayerName(l, "qkv"), c, {c, c, c}, 0.1);
      add.Row(LayerName(l, "out"), c, c, 0.1, /*with_bias=*/false);
      add.Replicated(LayerName(l, "norm2.weight"), {c}, false, 0, 1.0);
      add.Column(LayerName(l, "up"), c, 2 * c, 1, 0.1, /*with_bias=*/false);
      add.Row(LayerName(l, "down"), 2 * c, c, 0.1, /*with_bias=*/false);
    }
    if (plan.has_head) add.Replicated("norm.weight", {c}, false, 0, 1.0);
  }
  BlockParts NewBlockParts(const ModelConfig& c, int64_t layer, TpPlace tp,
                           const ParameterSet& params) const override {
    auto p = [&](const char* suffix) -> Parameter& {
      return params.Get(LayerName(layer, suffix));
    };
    const int64_t heads = c.n_head / tp.size;
    BlockParts parts;
    parts.attention = {.qkv_weight = &p("qkv.weight"),
                       .out_weight = &p("out.weight"),
                       .heads = heads,
                       .kv_heads = heads,
                       .head_dim = c.HeadDim()};
    parts.norm1 = std::make_shared<ToyNorm>(p("norm1.weight"));
    parts.norm2 = std::make_shared<ToyNorm>(p("norm2.weight"));
    parts.mlp = std::make_shared<ToyMlp>(2 * c.d_model / tp.size,
                                         p("up.weight"), p("down.weight"));
    parts.positions = std::make_shared<ToyPositions>(heads, c.HeadDim());
    return parts;
  }
  ChunkEnds Ends(const ModelConfig&, const ChunkPlan& plan,
                 const ParameterSet& params) const override {
    ChunkEnds ends;
    if (plan.has_embedding) ends.embedding = &params.Get("embed");
    if (plan.has_head) {
      ends.norm = std::make_shared<ToyNorm>(params.Get("norm.weight"));
      ends.head = &params.Get("embed");
    }
    return ends;
  }
  std::vector<HfTensorMapping> HfTensors(
      const ModelConfig& config) const override {
    std::vector<HfTensorMapping> table;
    for (const auto& [name, shape] : ModelTensorShapes(config)) {
      table.push_back(HfSame(name, shape, "model." + name));
    }
    return table;
  }
};

ModelConfig ToyConfig() {
  static const bool registered = [] {
    static const ToyFamily family;
    RegisterModelFamily(family);
    return true;
  }();
  EXPECT_TRUE(registered);
  ModelConfig c;
  c.family = kToy;
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
        static_cast<int32_t>(RandomBits(11, stream, i) % vocab);
  }
  return x;
}

constexpr int64_t kBatch = 2;

class ToyFamilyTest : public ::testing::TestWithParam<Recompute> {
 protected:
  void SetUp() override {
    AddModelParameters(config_, whole_, TpPlace{}, 99, Device::Cpu(),
                       DType::kF64, params_);
    chunk_ =
        FamilyOf(config_).NewChunk(config_, ChunkSetup{.plan = whole_,
                                                       .tp = TpPlace{},
                                                       .tp_comm = &tp_,
                                                       .params = &params_,
                                                       .micro_batch = kBatch,
                                                       .device = Device::Cpu(),
                                                       .dtype = DType::kF64,
                                                       .options = Options()});
    tokens_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 1);
    targets_ = RandomTokens(kBatch, config_.seq_len, config_.vocab_size, 2);
  }

  BlockOptions Options() const {
    BlockOptions o;
    o.recompute = GetParam();
    o.defer_weight_grads = true;
    return o;
  }

  double Loss() {
    chunk_->Forward(0, tokens_, Tensor(), targets_, 1.0, nullptr);
    const double loss = chunk_->MeanLoss(0);
    chunk_->BackwardInput(0, Tensor(), nullptr);
    chunk_->BackwardWeight(0);
    return loss;
  }

  ModelConfig config_ = ToyConfig();
  ChunkPlan whole_{0, 2, true, true};
  SelfCommunicator tp_{"tp"};
  ParameterSet params_;
  std::unique_ptr<ModelChunk> chunk_;
  Tensor tokens_, targets_;
};

TEST_P(ToyFamilyTest, IsKnownByName) {
  ASSERT_TRUE(ParseModelFamily("toy").ok());
  EXPECT_EQ(*ParseModelFamily("toy"), kToy);
  EXPECT_EQ(config_.Validate(), absl::OkStatus());
  EXPECT_EQ(FamilyOf(config_).HfTensors(config_).size(),
            ModelTensorShapes(config_).size());
}

TEST_P(ToyFamilyTest, EveryParameterMatchesFiniteDifferences) {
  test::ExpectGradientsMatchFiniteDifferences(
      params_, [this] { return Loss(); }, 4);
}

TEST_P(ToyFamilyTest, TwoPipelineStagesEqualTheWholeModel) {
  params_.ZeroGrads();
  const double whole_loss = Loss();
  // Stage 0: the embedding and layer 0; stage 1: layer 1 and the head, on
  // parameters of their own, initialized alike by name.
  const ChunkPlan first{0, 1, true, false}, last{1, 1, false, true};
  ParameterSet p0, p1;
  AddModelParameters(config_, first, TpPlace{}, 99, Device::Cpu(), DType::kF64,
                     p0);
  AddModelParameters(config_, last, TpPlace{}, 99, Device::Cpu(), DType::kF64,
                     p1);
  p0.ZeroGrads();
  p1.ZeroGrads();
  DecoderChunk c0(config_, first, TpPlace{}, tp_, p0, kBatch, Device::Cpu(),
                  DType::kF64, Options());
  DecoderChunk c1(config_, last, TpPlace{}, tp_, p1, kBatch, Device::Cpu(),
                  DType::kF64, Options());
  Tensor hidden = Tensor::Empty({c0.rows(), c0.width()}, DType::kF64);
  Tensor dhidden = Tensor::Empty({c1.rows(), c1.width()}, DType::kF64);
  c0.Forward(0, tokens_, Tensor(), Tensor(), 1.0, &hidden);
  c1.Forward(0, Tensor(), hidden, targets_, 1.0, nullptr);
  EXPECT_NEAR(c1.MeanLoss(0), whole_loss, 1e-12);
  c1.BackwardInput(0, Tensor(), &dhidden);
  c1.BackwardWeight(0);
  c0.BackwardInput(0, dhidden, nullptr);
  c0.BackwardWeight(0);
  for (Parameter* p : params_.all()) {
    // The tied embedding's gradient is the sum of both stages'.
    Tensor grad = Tensor::Zeros(p->grad.shape(), DType::kF64);
    for (ParameterSet* stage : {&p0, &p1}) {
      if (Parameter* q = stage->Find(p->name)) {
        for (int64_t i = 0; i < grad.numel(); ++i) {
          grad.data<double>()[i] += q->grad.data<double>()[i];
        }
      }
    }
    for (int64_t i = 0; i < grad.numel(); ++i) {
      EXPECT_NEAR(grad.data<double>()[i], p->grad.data<double>()[i], 1e-12)
          << p->name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recompute, ToyFamilyTest,
                         ::testing::Values(Recompute::kNone,
                                           Recompute::kSelective,
                                           Recompute::kFull));

}  // namespace
}  // namespace trellis
