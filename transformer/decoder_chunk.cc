#include "transformer/decoder_chunk.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "framework/kernels/accumulate.h"
#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/matmul.h"
#include "transformer/decoder_chunk_state.h"

namespace trellis {

namespace {

std::vector<std::unique_ptr<DecoderBlock>> FamilyBlocks(
    const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
    const ParameterSet& params, const BlockOptions& options) {
  const ModelFamily& family = FamilyOf(config);
  std::vector<std::unique_ptr<DecoderBlock>> blocks;
  for (int64_t l = plan.first_layer; l < plan.first_layer + plan.num_layers;
       ++l) {
    blocks.push_back(std::make_unique<DecoderBlock>(
        config, tp, family.NewBlockParts(config, l, tp, params), options));
  }
  return blocks;
}

}  // namespace

DecoderChunk::DecoderChunk(const ModelConfig& config, const ChunkPlan& plan,
                           TpPlace tp, Communicator& tp_comm,
                           const ParameterSet& params, int64_t micro_batch,
                           Device device, DType dtype, BlockOptions options)
    : DecoderChunk(config, plan, tp, tp_comm,
                   FamilyOf(config).Ends(config, plan, params),
                   FamilyBlocks(config, plan, tp, params, options), micro_batch,
                   device, dtype, options) {}

DecoderChunk::DecoderChunk(const ModelConfig& config, const ChunkPlan& plan,
                           TpPlace tp, Communicator& tp_comm, ChunkEnds ends,
                           std::vector<std::unique_ptr<DecoderBlock>> blocks,
                           int64_t micro_batch, Device device, DType dtype,
                           BlockOptions options)
    : config_(config),
      plan_(plan),
      tp_(tp),
      tp_comm_(tp_comm),
      micro_batch_(micro_batch),
      device_(device),
      dtype_(dtype),
      options_(options),
      ends_(std::move(ends)),
      rows_(tp, options.sequence_parallel),
      blocks_(std::move(blocks)) {
  TRELLIS_CHECK_EQ(tp_comm.size(), tp.size);
  TRELLIS_CHECK_EQ(static_cast<int64_t>(blocks_.size()), plan.num_layers);
  routing_.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    routing_[l].layer = plan.first_layer + static_cast<int64_t>(l);
    routed_.push_back(blocks_[l]->RoutedExperts() > 0);
  }
  // Blocks of one class share a workspace: the first of them makes it.
  for (size_t l = 0; l < blocks_.size(); ++l) {
    size_t first = 0;
    while (!blocks_[first]->SharesWorkspace(*blocks_[l])) ++first;
    if (first == l) workspace_makers_.push_back(l);
    const auto maker =
        std::find(workspace_makers_.begin(), workspace_makers_.end(), first);
    work_of_.push_back(maker - workspace_makers_.begin());
  }
  if (plan.has_embedding) TRELLIS_CHECK(ends_.embedding != nullptr);
  if (plan.has_head) {
    TRELLIS_CHECK(ends_.head != nullptr && ends_.norm != nullptr);
    TRELLIS_CHECK_GE(options.loss_chunk_rows, 0);
  }
  const Parameter* vocab = plan.has_head ? ends_.head : ends_.embedding;
  if (vocab != nullptr) vocab_ = VocabShard::For(vocab->spec);
}

int64_t DecoderChunk::BiasExperts(size_t l) const {
  if (!routed_[l] || config_.moe_bias_update_rate <= 0) return 0;
  return blocks_[l]->RoutedExperts();
}

void DecoderChunk::AllocateRouterBias() {
  if (!router_bias_.empty()) return;
  router_bias_.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    if (const int64_t experts = BiasExperts(l); experts > 0) {
      router_bias_[l] = Tensor::Zeros({experts}, dtype_, device_);
      blocks_[l]->set_router_bias(&router_bias_[l]);
    }
  }
}

void DecoderChunk::SetExpertBias(const ExpertBias& bias) {
  AllocateRouterBias();
  for (size_t l = 0; l < blocks_.size(); ++l) {
    if (!router_bias_[l].defined()) continue;
    CopyExpertBiasRow(bias.Row(plan_.first_layer + static_cast<int64_t>(l)),
                      router_bias_[l]);
  }
}

void DecoderChunk::AllocateWorkspace() {
  if (ping_.defined()) return;
  AllocateRouterBias();
  for (const size_t maker : workspace_makers_) {
    works_.push_back(
        blocks_[maker]->NewWorkspace(micro_batch_, dtype_, device_));
  }
  ping_ = Tensor::Empty({rows(), config_.d_model}, dtype_, device_);
  pong_ = Tensor::Empty({rows(), config_.d_model}, dtype_, device_);
  if (NeedsFullRows()) {
    full_rows_ = Tensor::Empty({FullRows(), config_.d_model}, dtype_, device_);
  }
  if (plan_.has_head) {
    const std::vector<std::pair<Shape, DType>> shapes = HeadWorkspaceShapes();
    Tensor* buffers[] = {&head_lnf_, &head_logits_, &head_row_max_,
                         &head_sums_};
    TRELLIS_CHECK_EQ(shapes.size(), std::size(buffers));
    for (size_t i = 0; i < shapes.size(); ++i) {
      *buffers[i] = Tensor::Empty(shapes[i].first, shapes[i].second, device_);
    }
  }
}

DecoderChunk::~DecoderChunk() = default;

DecoderChunk::State& DecoderChunk::Acquire(int mb) {
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
      if (ends_.norm->has_mean()) s->meanf = next();
      s->rstdf = next();
      s->dlnf = next();
      s->losses = next();
    }
    if (options_.document_mask) s->doc_start = next();
    if (plan_.has_head && options_.eod_mask_loss) s->loss_weight = next();
    TRELLIS_CHECK_EQ(i, shapes.size());
    for (const auto& block : blocks_) {
      s->blocks.push_back(block->NewState(micro_batch_, dtype_, device_));
    }
  }
  return *(live_[mb] = std::move(s));
}

std::vector<std::pair<Shape, DType>> DecoderChunk::OwnStateShapes() const {
  const int64_t n = FullRows(), nl = rows(), c = config_.d_model;
  const DType stats = StatsDType(dtype_);
  std::vector<std::pair<Shape, DType>> shapes = {
      {{n}, DType::kI32}, {{n}, DType::kI32}, {{nl, c}, dtype_}};
  if (plan_.has_embedding) shapes.push_back({{n, c}, dtype_});
  if (plan_.has_head) {
    if (ends_.norm->has_mean()) shapes.push_back({{nl}, stats});  // meanf
    shapes.push_back({{nl}, stats});                              // rstdf
    shapes.push_back({{nl, c}, dtype_});                          // dlnf
    shapes.push_back({{n}, stats});                               // losses
  }
  if (options_.document_mask) {
    shapes.push_back({{micro_batch_, config_.seq_len}, DType::kI32});
  }
  if (plan_.has_head && options_.eod_mask_loss) {
    shapes.push_back({{n}, DType::kF32});  // loss_weight
  }
  return shapes;
}

int64_t DecoderChunk::HeadChunkRows() const {
  const int64_t r = options_.loss_chunk_rows;
  return r == 0 ? FullRows() : std::min(r, FullRows());
}

bool DecoderChunk::NeedsFullRows() const {
  return rows_.on() && (plan_.has_embedding || plan_.has_head);
}

std::vector<Parameter*> DecoderChunk::TpPartialGradients() const {
  std::vector<Parameter*> partial;
  for (const auto& block : blocks_) {
    for (Parameter* p : block->QkNormParameters()) partial.push_back(p);
  }
  if (!rows_.on()) return partial;
  for (const auto& block : blocks_) {
    for (Parameter* p : block->NormParameters()) partial.push_back(p);
  }
  if (plan_.has_head) {
    for (Parameter* p : ends_.norm->parameters()) partial.push_back(p);
  }
  return partial;
}

std::vector<std::pair<Shape, DType>> DecoderChunk::HeadWorkspaceShapes() const {
  if (!plan_.has_head) return {};
  const int64_t r = HeadChunkRows();
  const DType stats = StatsDType(dtype_);
  return {{{FullRows(), config_.d_model}, dtype_},  // ln_f output
          {{r, vocab_.rows}, dtype_},               // logits, then dlogits
          {{r}, stats},                             // row max
          {{2 * r}, stats}};                        // sum of exps, target logit
}

namespace {

size_t Bytes(const std::vector<std::pair<Shape, DType>>& shapes) {
  size_t bytes = 0;
  for (const auto& [shape, dtype] : shapes) {
    bytes += NumElements(shape) * DTypeSize(dtype);
  }
  return bytes;
}

}  // namespace

size_t DecoderChunk::StateBytes() const {
  size_t bytes = Bytes(OwnStateShapes());
  for (const auto& block : blocks_) {
    bytes += block->StateBytes(micro_batch_, dtype_, device_);
  }
  return bytes;
}

size_t DecoderChunk::WorkspaceBytes() const {
  size_t bytes = 2 * rows() * config_.d_model * DTypeSize(dtype_);  // ping-pong
  if (NeedsFullRows()) {
    bytes += FullRows() * config_.d_model * DTypeSize(dtype_);
  }
  for (const size_t maker : workspace_makers_) {
    bytes += blocks_[maker]->WorkspaceBytes(micro_batch_, dtype_, device_);
  }
  for (size_t l = 0; l < blocks_.size(); ++l) {
    bytes += BiasExperts(l) * DTypeSize(dtype_);
  }
  return bytes + Bytes(HeadWorkspaceShapes());
}

DecoderChunk::State& DecoderChunk::Live(int mb) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  return *it->second;
}

void DecoderChunk::SetMasks(const ChunkMasks& masks) {
  TRELLIS_CHECK(masks.doc_start.defined() == options_.document_mask)
      << "doc_start given: " << masks.doc_start.defined()
      << ", document masking: " << options_.document_mask;
  TRELLIS_CHECK(!masks.loss_weight.defined() ||
                (plan_.has_head && options_.eod_mask_loss))
      << "loss weights need the last chunk with EOT loss masking";
  next_masks_ = masks;
}

void DecoderChunk::TakeMasks(State& s, double loss_scale) {
  const ChunkMasks masks = std::exchange(next_masks_, ChunkMasks{});
  if (options_.document_mask) {
    TRELLIS_CHECK(masks.doc_start.defined())
        << "document masking: SetMasks before each Forward";
    s.doc_start.CopyFrom(masks.doc_start);
  }
  for (DecoderBlock::State& b : s.blocks) {
    b.doc_start = s.doc_start;
    b.loss_scale = loss_scale;
  }
  s.weighted = masks.loss_weight.defined();
  if (s.weighted) s.loss_weight.CopyFrom(masks.loss_weight.View({FullRows()}));
  TRELLIS_CHECK(!(plan_.has_head && options_.eod_mask_loss && loss_scale > 0 &&
                  !s.weighted))
      << "EOT loss masking: a training Forward needs loss weights";
}

void DecoderChunk::Forward(int mb, const Tensor& tokens, const Tensor& input,
                           const Tensor& targets, double loss_scale,
                           Tensor* output, Tensor* loss_sum) {
  State& s = Acquire(mb);
  const int64_t n = FullRows();
  TakeMasks(s, loss_scale);
  const std::vector<std::vector<Parameter*>> units = GatherUnits();
  size_t unit = 0;
  if (plan_.has_embedding) {
    s.ids.CopyFrom(tokens.View({n}));
    Reading(units, unit++, +1, [&] { Embed(s); });
  } else {
    s.x0.CopyFrom(input);
  }
  const Tensor* x = &s.x0;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Reading(units, unit++, +1,
            [&] { blocks_[l]->Forward(tp_comm_, *x, s.blocks[l], Work(l)); });
    // Only blocks that route have routing to read (dense ones skip it).
    if (loss_scale > 0 && routed_[l]) {
      blocks_[l]->AddRouting(s.blocks[l], Work(l), routing_[l]);
    }
    x = &s.blocks[l].y;
  }
  if (!plan_.has_head) {
    output->CopyFrom(*x);
    return;
  }
  s.targets.CopyFrom(targets.View({n}));
  Reading(units, unit, +1, [&] { HeadForward(s, *x, loss_scale); });
  if (loss_sum != nullptr) {
    AccumulateSum(s.losses, static_cast<double>(n), *loss_sum);
  }
}

double DecoderChunk::MeanLoss(int mb) const {
  return Sum(TokenLosses(mb)) / static_cast<double>(FullRows());
}

void DecoderChunk::set_context(const ContextAttention* context) {
  TRELLIS_CHECK(context == nullptr ||
                context->split().Local() == config_.seq_len)
      << "the chunk's windows of " << config_.seq_len
      << " are not the split's share";
  context_ = context;
  for (const auto& block : blocks_) block->set_context(context);
}

void DecoderChunk::BackwardInput(int mb, const Tensor& doutput,
                                 Tensor* dinput) {
  State& s = Live(mb);
  const int64_t num_blocks = static_cast<int64_t>(blocks_.size());
  auto block_input = [&](int64_t l) -> const Tensor& {
    return l == 0 ? s.x0 : s.blocks[l - 1].y;
  };
  // `dy` holds the gradient of the current top; ping/pong alternate.
  // Without deferral the weight gradients are added here, group by group.
  const bool now = !options_.defer_weight_grads;
  const std::vector<std::vector<Parameter*>> groups =
      now ? WeightGroups() : std::vector<std::vector<Parameter*>>();
  size_t group = 0;
  // The units are read top down.
  const std::vector<std::vector<Parameter*>> units = GatherUnits();
  size_t unit = units.size();
  Tensor dy;
  if (plan_.has_head) {
    Reading(units, --unit, -1, [&] {
      HeadBackwardInput(s, block_input(num_blocks), ping_);
      if (now) {
        Writing(groups[group++],
                [&] { HeadBackwardWeight(s, block_input(num_blocks)); });
      }
    });
    dy = ping_;
  } else {
    dy = doutput;
  }
  for (int64_t l = num_blocks - 1; l >= 0; --l) {
    Tensor& dx = (dy.raw() == ping_.raw()) ? pong_ : ping_;
    auto backward = [&] {
      blocks_[l]->BackwardInput(tp_comm_, block_input(l), dy, s.blocks[l],
                                Work(l), dx);
    };
    Reading(units, --unit, -1, [&] {
      if (now) {
        Writing(groups[group++], backward);
      } else {
        backward();
      }
    });
    dy = dx;
  }
  if (plan_.has_embedding) {
    // The embedding's gradients read every row (an all-gather under
    // sequence parallelism).
    Reading(units, --unit, -1, [&] {
      rows_.GatherOutputGrad(tp_comm_, dy, s.dx0);
      if (now) Writing(groups[group++], [&] { EmbeddingBackwardWeight(s); });
    });
  } else {
    dinput->CopyFrom(dy);
  }
}

std::vector<std::vector<Parameter*>> DecoderChunk::WeightGroups() const {
  std::vector<std::vector<Parameter*>> groups;
  if (plan_.has_head) {
    groups.push_back(ends_.norm->parameters());
    // A head tied to this chunk's embedding is done with the embedding.
    if (!plan_.has_embedding || ends_.head != ends_.embedding) {
      groups.back().push_back(ends_.head);
    }
  }
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    groups.push_back((*it)->parameters());
  }
  if (plan_.has_embedding) {
    groups.push_back({ends_.embedding});
    if (ends_.positions != nullptr) groups.back().push_back(ends_.positions);
  }
  return groups;
}

std::vector<std::vector<Parameter*>> DecoderChunk::GatherUnits() const {
  std::vector<std::vector<Parameter*>> units;
  if (plan_.has_embedding) {
    units.push_back({ends_.embedding});
    if (ends_.positions != nullptr) units.back().push_back(ends_.positions);
  }
  for (const auto& block : blocks_) units.push_back(block->parameters());
  if (plan_.has_head) {
    units.push_back(ends_.norm->parameters());
    units.back().push_back(ends_.head);
  }
  return units;
}

void DecoderChunk::BackwardWeight(int mb, const WeightsDone& done) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  State& s = *it->second;
  // Without deferral BackwardInput already did the work: only report.
  const bool defer = options_.defer_weight_grads;
  const std::vector<std::vector<Parameter*>> groups =
      done || defer ? WeightGroups() : std::vector<std::vector<Parameter*>>();
  size_t group = 0;
  // Deferred work reads the units top down, one per group.
  const std::vector<std::vector<Parameter*>> units =
      defer ? GatherUnits() : std::vector<std::vector<Parameter*>>();
  TRELLIS_CHECK_EQ(units.size(), defer ? groups.size() : 0);
  size_t unit = units.size();
  // Adds (when deferred) the next group's gradients, then reports it.
  auto next = [&](auto add) {
    const std::vector<Parameter*>* g =
        groups.empty() ? nullptr : &groups[group++];
    if (defer) Reading(units, --unit, -1, [&] { Writing(*g, add); });
    if (done) done(*g);
  };
  const int64_t num_blocks = static_cast<int64_t>(blocks_.size());
  auto block_input = [&](int64_t l) -> const Tensor& {
    return l == 0 ? s.x0 : s.blocks[l - 1].y;
  };
  if (plan_.has_head) {
    next([&] { HeadBackwardWeight(s, block_input(num_blocks)); });
  }
  for (int64_t l = num_blocks - 1; l >= 0; --l) {
    next([&] {
      blocks_[l]->BackwardWeight(tp_comm_, block_input(l), s.blocks[l],
                                 Work(l));
    });
  }
  if (plan_.has_embedding) next([&] { EmbeddingBackwardWeight(s); });
  free_.push_back(std::move(it->second));
  live_.erase(it);
}

const Tensor& DecoderChunk::TokenLosses(int mb) const {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  TRELLIS_CHECK(plan_.has_head);
  return it->second->losses;
}

void DecoderChunk::Release(int mb) {
  auto it = live_.find(mb);
  TRELLIS_CHECK(it != live_.end()) << "microbatch " << mb << " not in flight";
  free_.push_back(std::move(it->second));
  live_.erase(it);
}

std::vector<ModelChunk::LayerRouting> DecoderChunk::TakeRouting() {
  std::vector<LayerRouting> taken;
  for (LayerRouting& r : routing_) {
    if (r.expert_slots.empty()) continue;
    taken.push_back(r);
    const int64_t layer = r.layer;
    r = LayerRouting{};
    r.layer = layer;
  }
  return taken;
}

int64_t DecoderChunk::RoutedExperts() const {
  int64_t experts = 0;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    if (routed_[l]) experts = std::max(experts, blocks_[l]->RoutedExperts());
  }
  return experts;
}

}  // namespace trellis
