#include "transformer/llama_block.h"

#include "framework/kernels/attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/matmul.h"
#include "framework/kernels/rmsnorm.h"
#include "framework/kernels/swiglu.h"
#include "transformer/llama_parameters.h"

namespace trellis {
namespace {

Parameter& Find(const ParameterSet& params, int64_t layer, const char* suffix) {
  return params.Get(LlamaLayerName(layer, suffix));
}

// The RoPE tables' dtype: the activations' on the CPU, float32 on CUDA.
DType TableDType(DType dtype, Device device) {
  return device.is_cpu() ? dtype : DType::kF32;
}

}  // namespace

LlamaBlock::LlamaBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
                       const ParameterSet& params, BlockOptions options)
    : DecoderBlock(config.seq_len, config.d_model,
                   config.n_head / tp.size * config.head_dim(), options,
                   SequenceSplit(tp, options.sequence_parallel)),
      local_heads_(config.n_head / tp.size),
      local_kv_heads_(LlamaLocalKvHeads(config, tp.size)),
      head_dim_(config.head_dim()),
      qkv_width_((config.n_head / tp.size + 2 * local_kv_heads_) *
                 config.head_dim()),
      ffn_width_(config.LlamaFfnHidden() / tp.size),
      eps_(config.norm_eps),
      rope_theta_(config.rope_theta),
      rope_scaling_(config.Scaling()),
      norm1_(&Find(params, layer, "input_layernorm.weight")),
      norm2_(&Find(params, layer, "post_attention_layernorm.weight")),
      qkv_w_(&Find(params, layer, "self_attn.qkv_proj.weight")),
      o_w_(&Find(params, layer, "self_attn.o_proj.weight")),
      gate_up_w_(&Find(params, layer, "mlp.gate_up_proj.weight")),
      down_w_(&Find(params, layer, "mlp.down_proj.weight")),
      params_{norm1_, qkv_w_, o_w_, norm2_, gate_up_w_, down_w_},
      qkv_proj_(*qkv_w_),
      o_proj_(*o_w_),
      gate_up_proj_(*gate_up_w_),
      down_proj_(*down_w_) {
  TRELLIS_CHECK_EQ(config.n_head % tp.size, 0);
  TRELLIS_CHECK(config.kv_heads() % tp.size == 0 ||
                tp.size % config.kv_heads() == 0);
  TRELLIS_CHECK_EQ(config.LlamaFfnHidden() % tp.size, 0);
  // The fused projections' splits must be the ones the math assumes.
  TRELLIS_CHECK_EQ(qkv_w_->spec.groups, 3);
  TRELLIS_CHECK_EQ(gate_up_w_->spec.groups, 2);
}

std::vector<DecoderBlock::Slot> LlamaBlock::Slots(int64_t batch, DType dtype,
                                                  Device device) const {
  const int64_t n = batch * seq_len_, c = d_model_, cl = local_width_;
  const int64_t w = qkv_width_, f = ffn_width_;
  const int64_t nl = rows_.Local(n);  // Rows of x2 and the statistics here.
  const DType stats = StatsDType(dtype);
  const auto [input, cheap, grad] = Places();
  const DType table = TableDType(dtype, device);
  return {
      {&Tensors::ln1, {n, c}, dtype, input},
      {&Tensors::rstd1, {nl}, stats, input},
      {&Tensors::qkv, {n, w}, dtype, input},
      {&Tensors::att, {n, cl}, dtype, cheap},
      {&Tensors::saved,
       AttentionSavedShape(device, batch, seq_len_, local_heads_),
       device.is_cpu() ? dtype : stats, cheap},
      {&Tensors::x2, {nl, c}, dtype, input},
      {&Tensors::ln2, {n, c}, dtype, input},
      {&Tensors::rstd2, {nl}, stats, input},
      {&Tensors::fc, {n, 2 * f}, dtype, input},
      {&Tensors::gelu, {n, f}, dtype, cheap},
      {&Tensors::dy, {n, c}, dtype, DyPlace()},
      {&Tensors::dfc, {n, 2 * f}, dtype, grad},
      {&Tensors::dln2, {n, c}, dtype, grad},
      {&Tensors::dx2, {n, c}, dtype, grad},
      {&Tensors::dqkv, {n, w}, dtype, grad},
      {&Tensors::dln1, {n, c}, dtype, grad},
      {&Tensors::dgelu, {n, f}, dtype, Place::kWorkspace},
      {&Tensors::cos, {seq_len_, head_dim_ / 2}, table, Place::kWorkspace},
      {&Tensors::sin, {seq_len_, head_dim_ / 2}, table, Place::kWorkspace},
  };
}

DecoderBlock::Workspace LlamaBlock::NewWorkspace(int64_t batch, DType dtype,
                                                 Device device) const {
  Workspace w = DecoderBlock::NewWorkspace(batch, dtype, device);
  const DType table = TableDType(dtype, device);
  TRELLIS_CHECK(table == DType::kF32 || table == DType::kF64)
      << "RoPE tables in " << DTypeName(table);
  absl::StatusOr<RopeTables> t =
      RopeTable(head_dim_, seq_len_, rope_theta_, rope_scaling_, table);
  TRELLIS_CHECK(t.ok()) << t.status();  // ModelConfig::Validate checked it.
  w.shared.cos.CopyFrom(t->cos);
  w.shared.sin.CopyFrom(t->sin);
  return w;
}

void LlamaBlock::Attention(Tensors& a, int64_t b,
                           const Tensor& doc_start) const {
  Tensor att = a.att.View({b, seq_len_, local_width_});
  AttentionForward(a.qkv.View({b, seq_len_, qkv_width_}), doc_start,
                   local_heads_, local_kv_heads_, att, a.saved,
                   options_.attention);
}

void LlamaBlock::ForwardActivations(Communicator& tp, const Tensor& x,
                                    const Tensor& doc_start, Tensors& a,
                                    Tensor& partial) const {
  const int64_t b = a.ln1.dim(0) / seq_len_;
  // Each norm writes this rank's rows; the gather (sequence parallel)
  // completes them for the column-parallel layer.
  Tensor ln1 = rows_.Mine(a.ln1);
  RmsNormForward(x, norm1_->value, eps_, ln1, a.rstd1);
  rows_.GatherInput(tp, a.ln1);
  qkv_proj_.Forward(a.ln1, a.qkv);
  // Positions are row mod T: the view's second-to-last dimension.
  Tensor qkv = a.qkv.View({b, seq_len_, qkv_width_});
  RopeForward(qkv, local_heads_, local_kv_heads_, a.cos, a.sin);
  Attention(a, b, doc_start);
  rows_.RowOutput(tp, o_proj_, a.att, partial, a.x2);
  Tensor ln2 = rows_.Mine(a.ln2);
  AddRmsNormForward(a.x2, x, norm2_->value, eps_, a.x2, ln2, a.rstd2);
  rows_.GatherInput(tp, a.ln2);
  gate_up_proj_.Forward(a.ln2, a.fc);
  SwiGluForward(a.fc, a.gelu);
}

void LlamaBlock::Forward(Communicator& tp, const Tensor& x, State& s,
                         Workspace& work) const {
  Tensors a = Use(s, work);
  ForwardActivations(tp, x, s.doc_start, a, work.partial);
  rows_.RowOutput(tp, down_proj_, a.gelu, work.partial, s.y);
  Add(s.y, a.x2, s.y);
}

void LlamaBlock::Recompute(Communicator& tp, const Tensor& x,
                           const Tensor& doc_start, Tensors& a, Tensor& partial,
                           bool need_activation) const {
  switch (options_.recompute) {
    case trellis::Recompute::kNone:
      return;
    case trellis::Recompute::kFull:
      ForwardActivations(tp, x, doc_start, a, partial);
      return;
    case trellis::Recompute::kSelective:
      // qkv is kept already rotated.
      Attention(a, a.qkv.dim(0) / seq_len_, doc_start);
      if (need_activation) SwiGluForward(a.fc, a.gelu);
      return;
  }
}

void LlamaBlock::BackwardInput(Communicator& tp, const Tensor& x,
                               const Tensor& dy, State& s, Workspace& work,
                               Tensor& dx) const {
  Tensors a = Use(s, work);
  const bool defer = options_.defer_weight_grads;
  Recompute(tp, x, s.doc_start, a, work.partial, /*need_activation=*/!defer);
  TakeOutputGrad(tp, dy, a);
  // MLP: dy -> d(swiglu) -> d(gate_up) -> dln2 (all-reduced; reduce-
  // scattered to this rank's rows under sequence parallelism) -> dx2.
  MatmulBackwardInput(a.dy, down_w_->value, a.dgelu, WeightLayout::kInOut,
                      GradWrite::kWrite);
  SwiGluBackwardWrite(a.fc, a.dgelu, a.dfc);
  MatmulBackwardInput(a.dfc, gate_up_w_->value, a.dln2, WeightLayout::kInOut,
                      GradWrite::kWrite);
  rows_.ReduceInputGrad(tp, a.dln2);
  Tensor dx2 = rows_.Mine(a.dx2);
  RmsNormBackwardInputResidual(rows_.Mine(a.dln2), a.x2, norm2_->value, a.rstd2,
                               rows_.Mine(a.dy), dx2);
  rows_.GatherOutputGrad(tp, dx2, a.dx2);
  // Attention: dx2 -> datt -> d(rotated qkv) -> dqkv -> dln1 -> dx.
  AttentionBackwardToQkv(o_w_->value, s.doc_start, qkv_width_, local_heads_,
                         local_kv_heads_, a, work.datt);
  Tensor dqkv = a.dqkv.View({a.qkv.dim(0) / seq_len_, seq_len_, qkv_width_});
  RopeBackward(dqkv, local_heads_, local_kv_heads_, a.cos, a.sin);
  MatmulBackwardInput(a.dqkv, qkv_w_->value, a.dln1, WeightLayout::kInOut,
                      GradWrite::kWrite);
  rows_.ReduceInputGrad(tp, a.dln1);
  if (!defer) WeightGradients(x, a);
  // Last: dx may be the buffer dy came in.
  RmsNormBackwardInputResidual(rows_.Mine(a.dln1), x, norm1_->value, a.rstd1,
                               rows_.Mine(a.dx2), dx);
}

void LlamaBlock::WeightGradients(const Tensor& x, const Tensors& a) const {
  Tensor no_bias;
  MatmulBackwardWeight(a.dy, a.gelu, down_w_->grad, no_bias);
  MatmulBackwardWeight(a.dfc, a.ln2, gate_up_w_->grad, no_bias);
  MatmulBackwardWeight(a.dx2, a.att, o_w_->grad, no_bias);
  MatmulBackwardWeight(a.dqkv, a.ln1, qkv_w_->grad, no_bias);
  // Over this rank's rows: a share under sequence parallelism.
  RmsNormBackwardWeight(rows_.Mine(a.dln2), a.x2, a.rstd2, norm2_->grad);
  RmsNormBackwardWeight(rows_.Mine(a.dln1), x, a.rstd1, norm1_->grad);
}

}  // namespace trellis
