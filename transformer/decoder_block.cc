#include "transformer/decoder_block.h"

#include <iterator>
#include <tuple>
#include <utility>

#include "framework/host_sync.h"
#include "framework/kernels/attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/matmul.h"
#include "transformer/model_family.h"

namespace trellis {

DecoderBlock::DecoderBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
                           const ParameterSet& params, BlockOptions options)
    : DecoderBlock(config, tp,
                   FamilyOf(config).NewBlockParts(config, layer, tp, params),
                   options) {}

DecoderBlock::DecoderBlock(const ModelConfig& config, TpPlace tp,
                           BlockParts parts, BlockOptions options)
    : seq_len_(config.seq_len),
      d_model_(config.d_model),
      local_width_(parts.attention.heads * parts.attention.head_dim),
      qkv_width_((parts.attention.heads + 2 * parts.attention.kv_heads) *
                 parts.attention.head_dim),
      options_(options),
      rows_(tp, options.sequence_parallel),
      parts_(std::move(parts)),
      qkv_proj_(
          ColumnLayer(parts_.attention.qkv_weight, parts_.attention.qkv_bias)),
      out_proj_(
          RowLayer(parts_.attention.out_weight, parts_.attention.out_bias)) {
  TRELLIS_CHECK(parts_.norm1 != nullptr && parts_.norm2 != nullptr &&
                parts_.mlp != nullptr);
  TRELLIS_CHECK_GT(parts_.attention.heads, 0);
  TRELLIS_CHECK_GT(parts_.attention.kv_heads, 0);
}

std::vector<Parameter*> DecoderBlock::parameters() const {
  std::vector<Parameter*> params = parts_.norm1->parameters();
  const AttentionParts& at = parts_.attention;
  for (Parameter* p :
       {at.qkv_weight, at.qkv_bias, at.out_weight, at.out_bias}) {
    if (p != nullptr) params.push_back(p);
  }
  if (parts_.qk_norm != nullptr) {
    for (Parameter* p : parts_.qk_norm->parameters()) params.push_back(p);
  }
  for (Parameter* p : parts_.norm2->parameters()) params.push_back(p);
  for (Parameter* p : parts_.mlp->parameters()) params.push_back(p);
  return params;
}

std::vector<Parameter*> DecoderBlock::QkNormParameters() const {
  if (parts_.qk_norm == nullptr) return {};
  return parts_.qk_norm->parameters();
}

std::vector<Parameter*> DecoderBlock::NormParameters() const {
  std::vector<Parameter*> params = parts_.norm1->parameters();
  for (Parameter* p : parts_.norm2->parameters()) params.push_back(p);
  return params;
}

std::vector<Slot> DecoderBlock::Slots(int64_t batch, DType dtype,
                                      Device device) const {
  const int64_t n = batch * seq_len_, c = d_model_, cl = local_width_;
  const int64_t w = qkv_width_;
  // Rows held here of the norms' inputs and statistics (N/tp under
  // sequence parallelism).
  const int64_t nl = rows_.Local(n);
  const DType stats = StatsDType(dtype);
  const SlotPlaces places = Places();
  const auto [input, cheap, grad] = places;
  std::vector<Slot> slots = {
      {&Tensors::ln1, {n, c}, dtype, input},
      {&Tensors::rstd1, {nl}, stats, input},
      {&Tensors::qkv, {n, w}, dtype, input},
      {&Tensors::att, {n, cl}, dtype, cheap},
      {&Tensors::saved,
       context_ != nullptr ? ContextShapes(batch).saved
                           : AttentionSavedShape(device, batch, seq_len_,
                                                 parts_.attention.heads),
       // The CPU keeps probabilities (activations) or what the context
       // attention saves; CUDA row statistics.
       device.is_cpu() ? dtype : stats, cheap},
      {&Tensors::x2, {nl, c}, dtype, input},
      {&Tensors::ln2, {n, c}, dtype, input},
      {&Tensors::rstd2, {nl}, stats, input},
      // Without deferral the incoming gradient is read in place (gathered
      // into the workspace under sequence parallelism).
      {&Tensors::dy, {n, c}, dtype, DyPlace()},
      {&Tensors::dln2, {n, c}, dtype, grad},
      {&Tensors::dx2, {n, c}, dtype, grad},
      {&Tensors::dqkv, {n, w}, dtype, grad},
      {&Tensors::dln1, {n, c}, dtype, grad},
  };
  if (parts_.norm1->has_mean()) {
    slots.push_back({&Tensors::mean1, {nl}, stats, input});
  }
  if (parts_.norm2->has_mean()) {
    slots.push_back({&Tensors::mean2, {nl}, stats, input});
  }
  for (const Slot& s : parts_.mlp->Slots(n, dtype, places)) {
    slots.push_back(s);
  }
  if (parts_.qk_norm != nullptr) {
    for (const Slot& s : parts_.qk_norm->Slots(n, dtype, places)) {
      slots.push_back(s);
    }
  }
  if (parts_.positions != nullptr) {
    for (const Slot& s : parts_.positions->Slots(seq_len_, dtype, device)) {
      slots.push_back(s);
    }
  }
  if (context_ != nullptr) AddContextSlots(batch, dtype, cheap, slots);
  return slots;
}

DecoderBlock::State DecoderBlock::NewState(int64_t batch, DType dtype,
                                           Device device) const {
  State s;
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kState) {
      s.kept.*slot.member =
          Tensor::Empty(slot.shape, slot.dtype, SlotDevice(slot, device));
    }
  }
  s.y = Tensor::Empty({rows_.Local(batch * seq_len_), d_model_}, dtype, device);
  return s;
}

DecoderBlock::Workspace DecoderBlock::NewWorkspace(int64_t batch, DType dtype,
                                                   Device device) const {
  Workspace w;
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kWorkspace) {
      w.shared.*slot.member =
          Tensor::Empty(slot.shape, slot.dtype, SlotDevice(slot, device));
    }
  }
  w.datt = Tensor::Empty({batch * seq_len_, local_width_}, dtype, device);
  if (rows_.on()) {
    w.partial = Tensor::Empty({batch * seq_len_, d_model_}, dtype, device);
  }
  if (parts_.positions != nullptr && context_ != nullptr) {
    parts_.positions->FillTablesAt(context_->split().Mine(), w.shared);
  } else if (parts_.positions != nullptr) {
    parts_.positions->FillTables(seq_len_, w.shared);
  }
  return w;
}

int64_t DecoderBlock::RoutedExperts() const {
  return parts_.mlp->RoutedExperts();
}

void DecoderBlock::AddRouting(const State& state, const Workspace& work,
                              ModelChunk::LayerRouting& routing) const {
  const Tensors t = Use(state, work);
  if (!t.counts.defined()) return;
  // The losses' one host read; the forward took the counts' host copy.
  TRELLIS_CHECK(t.host_counts.defined()) << "a router without host counts";
  const Tensor losses = ReadToHost(t.route_losses);
  const Tensor& counts = t.host_counts;
  for (int i = 0; i < 2; ++i) {
    const double v = losses.dtype() == DType::kF64
                         ? losses.data<double>()[i]
                         : static_cast<double>(losses.data<float>()[i]);
    (i == 0 ? routing.aux_loss : routing.z_loss) += v;
  }
  routing.expert_slots.resize(counts.numel(), 0.0);
  for (int64_t e = 0; e < counts.numel(); ++e) {
    routing.expert_slots[e] += counts.data<int32_t>()[e];
  }
}

bool DecoderBlock::SharesWorkspace(const DecoderBlock& other) const {
  // The shapes for one window tell the places and widths apart.
  auto workspace = [](const DecoderBlock& b) {
    std::vector<std::tuple<Tensor Tensors::*, Shape, DType>> slots;
    for (const Slot& s : b.Slots(1, DType::kF32, Device::Cpu())) {
      if (s.place == Place::kWorkspace) {
        slots.emplace_back(s.member, s.shape, s.dtype);
      }
    }
    return slots;
  };
  return local_width_ == other.local_width_ && rows_.on() == other.rows_.on() &&
         workspace(*this) == workspace(other);
}

size_t DecoderBlock::StateBytes(int64_t batch, DType dtype,
                                Device device) const {
  size_t bytes =
      rows_.Local(batch * seq_len_) * d_model_ * DTypeSize(dtype);  // y
  for (const Slot& slot : Slots(batch, dtype, device)) {
    // Host slots take the device's memory only on the CPU.
    if (slot.place == Place::kState && SlotDevice(slot, device) == device) {
      bytes += NumElements(slot.shape) * DTypeSize(slot.dtype);
    }
  }
  return bytes;
}

size_t DecoderBlock::WorkspaceBytes(int64_t batch, DType dtype,
                                    Device device) const {
  size_t bytes = batch * seq_len_ * local_width_ * DTypeSize(dtype);  // datt
  if (rows_.on()) bytes += batch * seq_len_ * d_model_ * DTypeSize(dtype);
  for (const Slot& slot : Slots(batch, dtype, device)) {
    // Host slots take the device's memory only on the CPU.
    if (slot.place == Place::kWorkspace && SlotDevice(slot, device) == device) {
      bytes += NumElements(slot.shape) * DTypeSize(slot.dtype);
    }
  }
  return bytes;
}

DecoderBlock::Tensors DecoderBlock::Use(const State& s,
                                        const Workspace& w) const {
  // Slot shapes do not matter here: only where each tensor lives.
  Tensors t;
  for (const Slot& slot : Slots(0, DType::kF32, Device::Cpu())) {
    t.*slot.member = slot.place == Place::kState ? s.kept.*slot.member
                                                 : w.shared.*slot.member;
  }
  t.loss_scale = s.loss_scale;
  t.ep = ep_;
  if (router_bias_ != nullptr) t.router_bias = *router_bias_;
  t.cp = context_ != nullptr ? &context_->group() : nullptr;
  return t;
}

SlotPlaces DecoderBlock::Places() const {
  const bool full = options_.recompute == Recompute::kFull;
  const bool keep_all = options_.recompute == Recompute::kNone;
  return SlotPlaces{
      .input = full ? Place::kWorkspace : Place::kState,
      .cheap = keep_all ? Place::kState : Place::kWorkspace,
      .grad = options_.defer_weight_grads ? Place::kState : Place::kWorkspace,
  };
}

DecoderBlock::Place DecoderBlock::DyPlace() const {
  if (options_.defer_weight_grads) return Place::kState;
  return rows_.on() ? Place::kWorkspace : Place::kUnused;
}

namespace {

Tensor BlockTensors::*const kContextKept[] = {&BlockTensors::cp_kept0,
                                              &BlockTensors::cp_kept1};
Tensor BlockTensors::*const kContextScratch[] = {
    &BlockTensors::cp_scratch0, &BlockTensors::cp_scratch1,
    &BlockTensors::cp_scratch2, &BlockTensors::cp_scratch3,
    &BlockTensors::cp_scratch4, &BlockTensors::cp_scratch5};

}  // namespace

ContextSlots DecoderBlock::ContextShapes(int64_t batch) const {
  const AttentionParts& at = parts_.attention;
  ContextSlots slots =
      context_->Slots(batch, at.heads, at.kv_heads, at.head_dim);
  TRELLIS_CHECK(slots.kept.size() <= std::size(kContextKept) &&
                slots.scratch.size() <= std::size(kContextScratch));
  return slots;
}

void DecoderBlock::AddContextSlots(int64_t batch, DType dtype, Place kept,
                                   std::vector<Slot>& slots) const {
  const ContextSlots shapes = ContextShapes(batch);
  for (size_t i = 0; i < shapes.kept.size(); ++i) {
    slots.push_back({kContextKept[i], shapes.kept[i], dtype, kept});
  }
  for (size_t i = 0; i < shapes.scratch.size(); ++i) {
    const ContextSlot& c = shapes.scratch[i];
    slots.push_back({kContextScratch[i], c.shape, c.index ? DType::kI32 : dtype,
                     Place::kWorkspace});
  }
}

ContextTensors DecoderBlock::Context(const Tensors& a) {
  ContextTensors t;
  for (Tensor Tensors::*m : kContextKept) {
    if ((a.*m).defined()) t.kept.push_back(a.*m);
  }
  for (Tensor Tensors::*m : kContextScratch) {
    if ((a.*m).defined()) t.scratch.push_back(a.*m);
  }
  return t;
}

void DecoderBlock::Attention(Tensors& a, const Tensor& doc_start) const {
  const int64_t b = a.qkv.dim(0) / seq_len_;
  Tensor att = a.att.View({b, seq_len_, local_width_});
  if (context_ != nullptr) {
    ContextTensors t = Context(a);
    context_->Forward(a.qkv.View({b, seq_len_, qkv_width_}), doc_start,
                      parts_.attention.heads, parts_.attention.kv_heads, att,
                      a.saved, t);
    return;
  }
  AttentionForward(a.qkv.View({b, seq_len_, qkv_width_}), doc_start,
                   parts_.attention.heads, parts_.attention.kv_heads, att,
                   a.saved, options_.attention);
}

void DecoderBlock::ForwardActivations(Communicator& tp, const Tensor& x,
                                      const Tensor& doc_start, Tensors& a,
                                      Tensor& partial) const {
  // Each norm writes this rank's rows of its output; the gather (sequence
  // parallel) completes them for the column-parallel layer.
  Tensor ln1 = rows_.Mine(a.ln1);
  parts_.norm1->Forward(x, ln1, a.mean1, a.rstd1);
  rows_.GatherInput(tp, a.ln1);
  qkv_proj_.Forward(a.ln1, a.qkv);
  if (parts_.qk_norm != nullptr) parts_.qk_norm->Forward(a.qkv, a);
  if (parts_.positions != nullptr) {
    // Positions are row mod T: the view's second-to-last dimension.
    Tensor qkv = a.qkv.View({a.qkv.dim(0) / seq_len_, seq_len_, qkv_width_});
    parts_.positions->Forward(qkv, /*first=*/0, a);
  }
  Attention(a, doc_start);
  rows_.RowOutput(tp, out_proj_, a.att, partial, a.x2);
  // The residual add and norm2 in one pass.
  Tensor ln2 = rows_.Mine(a.ln2);
  parts_.norm2->AddForward(a.x2, x, a.x2, ln2, a.mean2, a.rstd2);
  rows_.GatherInput(tp, a.ln2);
  parts_.mlp->Up(a);
}

void DecoderBlock::Forward(Communicator& tp, const Tensor& x, State& s,
                           Workspace& work) const {
  Tensors a = Use(s, work);
  ForwardActivations(tp, x, s.doc_start, a, work.partial);
  const RowParallelLinear* down = parts_.mlp->down();
  if (down == nullptr) {
    // The MLP's own partial sums, reduced as a row-parallel layer's.
    Tensor& sums = rows_.on() ? work.partial : s.y;
    parts_.mlp->Down(a, sums);
    rows_.ReducePartial(tp, sums, s.y);
    Add(s.y, a.x2, s.y);
    return;
  }
  if (options_.residual_in_gemm) {
    rows_.RowOutputResidual(tp, *down, a.gelu, a.x2, work.partial, s.y);
    return;
  }
  rows_.RowOutput(tp, *down, a.gelu, work.partial, s.y);
  Add(s.y, a.x2, s.y);
}

void DecoderBlock::Recompute(Communicator& tp, const Tensor& x,
                             const Tensor& doc_start, Tensors& a,
                             Tensor& partial, bool need_activation) const {
  switch (options_.recompute) {
    case trellis::Recompute::kNone:
      return;
    case trellis::Recompute::kFull:
      ForwardActivations(tp, x, doc_start, a, partial);
      return;
    case trellis::Recompute::kSelective:
      // qkv is kept as attention reads it (positions applied).
      Attention(a, doc_start);
      if (need_activation) parts_.mlp->Activation(a.fc, a.gelu);
      return;
  }
}

void DecoderBlock::AttentionBackward(const Tensor& doc_start, Tensors& a,
                                     Tensor& datt) const {
  MatmulBackwardInput(a.dx2, parts_.attention.out_weight->value, datt,
                      WeightLayout::kInOut, GradWrite::kWrite);
  const int64_t b = a.qkv.dim(0) / seq_len_;
  const Shape qkv_shape = {b, seq_len_, qkv_width_};
  const Shape att_shape = {b, seq_len_, local_width_};
  Tensor dqkv = a.dqkv.View(qkv_shape);
  if (context_ != nullptr) {
    ContextTensors t = Context(a);
    context_->Backward(datt.View(att_shape), a.qkv.View(qkv_shape), doc_start,
                       a.att.View(att_shape), a.saved, parts_.attention.heads,
                       parts_.attention.kv_heads, dqkv, t);
  } else {
    ::trellis::AttentionBackward(
        datt.View(att_shape), a.qkv.View(qkv_shape), doc_start,
        a.att.View(att_shape), a.saved, parts_.attention.heads,
        parts_.attention.kv_heads, dqkv, options_.attention, GradWrite::kWrite);
  }
  if (parts_.positions != nullptr) parts_.positions->Backward(dqkv, a);
  if (parts_.qk_norm != nullptr) parts_.qk_norm->BackwardInput(a.dqkv, a);
  MatmulBackwardInput(a.dqkv, parts_.attention.qkv_weight->value, a.dln1,
                      WeightLayout::kInOut, GradWrite::kWrite);
}

void DecoderBlock::BackwardInput(Communicator& tp, const Tensor& x,
                                 const Tensor& dy, State& s, Workspace& work,
                                 Tensor& dx) const {
  Tensors a = Use(s, work);
  const bool defer = options_.defer_weight_grads;
  Recompute(tp, x, s.doc_start, a, work.partial, /*need_activation=*/!defer);
  // The whole output gradient: the caller's tensor itself, or gathered
  // (and kept) where DyPlace says.
  if (DyPlace() == Place::kUnused) {
    a.dy = dy;
  } else {
    rows_.GatherOutputGrad(tp, dy, a.dy);
  }
  // Each gradient buffer is written, not zero-filled and added to (the tp
  // all-reduce of a column-parallel layer's input gradient is CopyToTp's
  // backward, a reduce-scatter under sequence parallelism, leaving this
  // rank's rows). MLP: dy -> dln2 (all-reduced) -> dx2 = dy + norm2's
  // input gradient.
  parts_.mlp->BackwardInput(tp, a, a.dln2);
  rows_.ReduceInputGrad(tp, a.dln2);
  Tensor dx2 = rows_.Mine(a.dx2);
  parts_.norm2->BackwardInputResidual(rows_.Mine(a.dln2), a.x2, a.mean2,
                                      a.rstd2, rows_.Mine(a.dy), dx2);
  rows_.GatherOutputGrad(tp, dx2, a.dx2);
  // Attention: dx2 -> datt -> dqkv -> dln1 (all-reduced) -> dx.
  AttentionBackward(s.doc_start, a, work.datt);
  rows_.ReduceInputGrad(tp, a.dln1);
  if (!defer) WeightGradients(x, a);
  // Last: dx may be the buffer dy came in (the caller's ping-pong).
  parts_.norm1->BackwardInputResidual(rows_.Mine(a.dln1), x, a.mean1, a.rstd1,
                                      rows_.Mine(a.dx2), dx);
}

void DecoderBlock::BackwardWeight(Communicator& tp, const Tensor& x, State& s,
                                  Workspace& work) const {
  if (!options_.defer_weight_grads) return;  // Done in BackwardInput.
  Tensors a = Use(s, work);
  Recompute(tp, x, s.doc_start, a, work.partial, /*need_activation=*/true);
  WeightGradients(x, a);
}

void DecoderBlock::WeightGradients(const Tensor& x, const Tensors& a) const {
  // The MLP's and the attention's weight GEMMs, then every bias and norm
  // gradient that is a column sum (of the gradients above) in one
  // ColumnSumsMany; with bias_grad_epilogue the GEMMs form the bias
  // gradients. The norms' sums run over this rank's rows (a share under
  // sequence parallelism); the biases' over the whole gathered gradients.
  const bool in_gemm = options_.bias_grad_epilogue;
  std::vector<ColumnSumJob> jobs;
  parts_.mlp->WeightGradients(a, in_gemm, jobs);
  if (parts_.qk_norm != nullptr) parts_.qk_norm->WeightGradients(a);
  const AttentionParts& at = parts_.attention;
  Tensor no_bias;
  const std::pair<const Tensor*, const Tensor*> gemms[] = {{&a.dx2, &a.att},
                                                           {&a.dqkv, &a.ln1}};
  const std::pair<Parameter*, Parameter*> layers[] = {
      {at.out_weight, at.out_bias}, {at.qkv_weight, at.qkv_bias}};
  for (int i = 0; i < 2; ++i) {
    Parameter* bias = layers[i].second;
    MatmulBackwardWeight(*gemms[i].first, *gemms[i].second,
                         layers[i].first->grad,
                         in_gemm && bias != nullptr ? bias->grad : no_bias);
    if (!in_gemm && bias != nullptr) {
      jobs.push_back({.dout = gemms[i].first, .db = &bias->grad});
    }
  }
  const Tensor dln2 = rows_.Mine(a.dln2), dln1 = rows_.Mine(a.dln1);
  parts_.norm2->BlockWeightGradients(dln2, a.x2, a.mean2, a.rstd2, jobs);
  parts_.norm1->BlockWeightGradients(dln1, x, a.mean1, a.rstd1, jobs);
  if (!jobs.empty()) ColumnSumsMany(jobs);
}

}  // namespace trellis
