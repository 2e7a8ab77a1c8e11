#include "transformer/gpt_chunk.h"

#include "framework/kernels/elementwise.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"

namespace trellis {

struct GptChunk::State {
  Tensor ids, targets;  // (N) int32
  Tensor x0;            // (N, C) chunk input
  Tensor dx0;           // (N, C) gradient of the input (first chunk: for W)
  std::vector<Block::State> blocks;
  Tensor lnf, meanf, rstdf;  // (N, C), (N), (N)
  Tensor logits;             // (N, Vl); holds dlogits after BackwardInput
  Tensor dlnf;               // (N, C)
  VocabParallelLossState loss;
};

GptChunk::GptChunk(const GptConfig& config, const ChunkPlan& plan, TpPlace tp,
                   Communicator& tp_comm, const ParameterSet& params,
                   int64_t micro_batch, Device device, DType dtype,
                   BlockOptions options)
    : config_(config),
      plan_(plan),
      tp_(tp),
      tp_comm_(tp_comm),
      micro_batch_(micro_batch),
      device_(device),
      dtype_(dtype),
      options_(options) {
  TRELLIS_CHECK_EQ(tp_comm.size(), tp.size);
  if (plan.has_embedding || plan.has_head) {
    wte_ = params.Find("wte");
    TRELLIS_CHECK(wte_ != nullptr);
    vocab_ = VocabShard::For(wte_->spec);
  }
  if (plan.has_embedding) wpe_ = params.Find("wpe");
  if (plan.has_head) {
    lnf_w_ = params.Find("ln_f.weight");
    lnf_b_ = params.Find("ln_f.bias");
  }
  for (int64_t l = 0; l < plan.num_layers; ++l) {
    blocks_.emplace_back(config, plan.first_layer + l, tp, params, options);
  }
}

void GptChunk::AllocateWorkspace() {
  if (ping_.defined()) return;
  if (!blocks_.empty()) {
    work_ = blocks_.front().NewWorkspace(micro_batch_, dtype_, device_);
  }
  ping_ = Tensor::Empty({rows(), config_.d_model}, dtype_, device_);
  pong_ = Tensor::Empty({rows(), config_.d_model}, dtype_, device_);
}

GptChunk::~GptChunk() = default;

GptChunk::State& GptChunk::Acquire(int mb) {
  TRELLIS_CHECK(live_.find(mb) == live_.end())
      << "microbatch " << mb << " is already in flight";
  AllocateWorkspace();
  std::unique_ptr<State> s;
  if (!free_.empty()) {
    s = std::move(free_.back());
    free_.pop_back();
  } else {
    s = std::make_unique<State>();
    ++states_allocated_;
    const std::vector<std::pair<Shape, DType>> shapes = OwnStateShapes();
    size_t i = 0;
    auto next = [&]() {
      const auto& [shape, dtype] = shapes[i++];
      return Tensor::Empty(shape, dtype, device_);
    };
    s->ids = next();
    s->targets = next();
    s->x0 = next();
    if (plan_.has_embedding) s->dx0 = next();
    if (plan_.has_head) {
      s->lnf = next();
      s->meanf = next();
      s->rstdf = next();
      s->logits = next();
      s->dlnf = next();
    }
    TRELLIS_CHECK_EQ(i, shapes.size());
    for (const Block& block : blocks_) {
      s->blocks.push_back(block.NewState(micro_batch_, dtype_, device_));
    }
  }
  return *(live_[mb] = std::move(s));
}

std::vector<std::pair<Shape, DType>> GptChunk::OwnStateShapes() const {
  const int64_t n = rows(), c = config_.d_model;
  const DType stats = StatsDType(dtype_);
  std::vector<std::pair<Shape, DType>> shapes = {
      {{n}, DType::kI32}, {{n}, DType::kI32}, {{n, c}, dtype_}};
  if (plan_.has_embedding) shapes.push_back({{n, c}, dtype_});
  if (plan_.has_head) {
    shapes.push_back({{n, c}, dtype_});
    shapes.push_back({{n}, stats});
    shapes.push_back({{n}, stats});
    shapes.push_back({{n, vocab_.rows}, dtype_});
    shapes.push_back({{n, c}, dtype_});
  }
  return shapes;
}

size_t GptChunk::StateBytes() const {
  size_t bytes = 0;
  for (const auto& [shape, dtype] : OwnStateShapes()) {
    bytes += NumElements(shape) * DTypeSize(dtype);
  }
  // The loss's row statistics and per-token losses (tensor_parallel.h).
  if (plan_.has_head) bytes += 3 * rows() * DTypeSize(StatsDType(dtype_));
  for (const Block& block : blocks_) {
    bytes += block.StateBytes(micro_batch_, dtype_, device_);
  }
  return bytes;
}

size_t GptChunk::WorkspaceBytes() const {
  size_t bytes = 2 * rows() * config_.d_model * DTypeSize(dtype_);  // ping-pong
  if (!blocks_.empty()) {
    bytes += blocks_.front().WorkspaceBytes(micro_batch_, dtype_, device_);
  }
  return bytes;
}

GptChunk::State& GptChunk::Live(int mb) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  return *it->second;
}

double GptChunk::Forward(int mb, const Tensor& tokens, const Tensor& input,
                         const Tensor& targets, Tensor* output) {
  State& s = Acquire(mb);
  const int64_t n = rows();
  if (plan_.has_embedding) {
    s.ids.CopyFrom(tokens.View({n}));
    VocabParallelEmbeddingForward(tp_comm_, s.ids, *wte_, s.x0);
    Tensor x = s.x0.View({micro_batch_, config_.seq_len, config_.d_model});
    AddPositionEmbedding(wpe_->value, x);
  } else {
    s.x0.CopyFrom(input);
  }
  const Tensor* x = &s.x0;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    blocks_[l].Forward(tp_comm_, *x, s.blocks[l], work_);
    x = &s.blocks[l].y;
  }
  if (!plan_.has_head) {
    output->CopyFrom(*x);
    return 0.0;
  }
  s.targets.CopyFrom(targets.View({n}));
  HeadForward(s, *x);
  return Sum(s.loss.losses) / static_cast<double>(n);
}

void GptChunk::HeadForward(State& s, const Tensor& x) {
  LayerNormForward(x, lnf_w_->value, lnf_b_->value, s.lnf, s.meanf, s.rstdf);
  MatmulForward(s.lnf, wte_->value, Tensor(), s.logits, WeightLayout::kOutIn);
  VocabParallelCrossEntropyForward(tp_comm_, s.logits, s.targets, vocab_,
                                   s.loss);
}

void GptChunk::HeadBackwardInput(State& s, const Tensor& x, double loss_scale,
                                 Tensor& dx) {
  const double scale = loss_scale / static_cast<double>(rows());
  VocabParallelCrossEntropyBackward(s.logits, s.targets, vocab_, s.loss, scale,
                                    s.logits);
  s.dlnf.Zero();
  MatmulBackwardInput(s.logits, wte_->value, s.dlnf, WeightLayout::kOutIn);
  CopyToTp::Backward(tp_comm_, s.dlnf);
  dx.Zero();
  LayerNormBackwardInput(s.dlnf, x, lnf_w_->value, s.meanf, s.rstdf, dx);
}

void GptChunk::HeadBackwardWeight(const State& s, const Tensor& x) {
  Tensor no_bias;
  MatmulBackwardWeight(s.logits, s.lnf, wte_->grad, no_bias,
                       WeightLayout::kOutIn);
  LayerNormBackwardWeight(s.dlnf, x, s.meanf, s.rstdf, lnf_w_->grad,
                          lnf_b_->grad);
}

void GptChunk::EmbeddingBackwardWeight(const State& s) {
  VocabParallelEmbeddingBackwardWeight(s.ids, s.dx0, *wte_);
  PositionEmbeddingBackwardWeight(
      s.dx0.View({micro_batch_, config_.seq_len, config_.d_model}), wpe_->grad);
}

void GptChunk::BackwardInput(int mb, const Tensor& doutput, double loss_scale,
                             Tensor* dinput) {
  State& s = Live(mb);
  const int64_t num_blocks = static_cast<int64_t>(blocks_.size());
  auto block_input = [&](int64_t l) -> const Tensor& {
    return l == 0 ? s.x0 : s.blocks[l - 1].y;
  };
  // `dy` holds the gradient of the current top; ping/pong alternate.
  Tensor dy;
  if (plan_.has_head) {
    HeadBackwardInput(s, block_input(num_blocks), loss_scale, ping_);
    if (!options_.defer_weight_grads) {
      HeadBackwardWeight(s, block_input(num_blocks));
    }
    dy = ping_;
  } else {
    dy = doutput;
  }
  for (int64_t l = num_blocks - 1; l >= 0; --l) {
    Tensor& dx = (dy.raw() == ping_.raw()) ? pong_ : ping_;
    blocks_[l].BackwardInput(tp_comm_, block_input(l), dy, s.blocks[l], work_,
                             dx);
    dy = dx;
  }
  if (plan_.has_embedding) {
    s.dx0.CopyFrom(dy);
    if (!options_.defer_weight_grads) EmbeddingBackwardWeight(s);
  } else {
    dinput->CopyFrom(dy);
  }
}

std::vector<std::vector<Parameter*>> GptChunk::WeightGroups() const {
  std::vector<std::vector<Parameter*>> groups;
  if (plan_.has_head) {
    groups.push_back({lnf_w_, lnf_b_});
    if (!plan_.has_embedding) groups.back().push_back(wte_);
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    groups.push_back(it->parameters());
  }
  if (plan_.has_embedding) groups.push_back({wte_, wpe_});
  return groups;
}

void GptChunk::BackwardWeight(int mb, const WeightsDone& done) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  State& s = *it->second;
  const std::vector<std::vector<Parameter*>> groups =
      done ? WeightGroups() : std::vector<std::vector<Parameter*>>();
  size_t group = 0;
  auto report = [&]() {
    if (done) done(groups[group++]);
  };
  // Without deferral BackwardInput already did the work: only report.
  const bool defer = options_.defer_weight_grads;
  const int64_t num_blocks = static_cast<int64_t>(blocks_.size());
  auto block_input = [&](int64_t l) -> const Tensor& {
    return l == 0 ? s.x0 : s.blocks[l - 1].y;
  };
  if (plan_.has_head) {
    if (defer) HeadBackwardWeight(s, block_input(num_blocks));
    report();
  }
  for (int64_t l = num_blocks - 1; l >= 0; --l) {
    blocks_[l].BackwardWeight(tp_comm_, block_input(l), s.blocks[l], work_);
    report();
  }
  if (plan_.has_embedding) {
    if (defer) EmbeddingBackwardWeight(s);
    report();
  }
  free_.push_back(std::move(it->second));
  live_.erase(it);
}

const Tensor& GptChunk::TokenLosses(int mb) const {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  TRELLIS_CHECK(plan_.has_head);
  return it->second->loss.losses;
}

void GptChunk::Release(int mb) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  free_.push_back(std::move(it->second));
  live_.erase(it);
}

}  // namespace trellis
