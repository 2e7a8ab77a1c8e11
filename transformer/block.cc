#include "transformer/block.h"

#include "absl/strings/str_cat.h"
#include "framework/kernels/attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"

namespace trellis {
namespace {

Parameter& Find(const ParameterSet& params, int64_t layer, const char* suffix) {
  return params.Get(LayerParameterName(layer, suffix));
}

}  // namespace

Block::Block(const ModelConfig& config, int64_t layer, TpPlace tp,
             const ParameterSet& params, BlockOptions options)
    : DecoderBlock(config.seq_len, config.d_model,
                   config.n_head / tp.size * config.head_dim(), options,
                   SequenceSplit(tp, options.sequence_parallel)),
      layer_(layer),
      local_heads_(config.n_head / tp.size),
      ln1_w_(&Find(params, layer, "ln_1.weight")),
      ln1_b_(&Find(params, layer, "ln_1.bias")),
      ln2_w_(&Find(params, layer, "ln_2.weight")),
      ln2_b_(&Find(params, layer, "ln_2.bias")),
      c_attn_w_(&Find(params, layer, "attn.c_attn.weight")),
      attn_proj_w_(&Find(params, layer, "attn.c_proj.weight")),
      c_fc_w_(&Find(params, layer, "mlp.c_fc.weight")),
      mlp_proj_w_(&Find(params, layer, "mlp.c_proj.weight")),
      c_attn_b_(&Find(params, layer, "attn.c_attn.bias")),
      attn_proj_b_(&Find(params, layer, "attn.c_proj.bias")),
      c_fc_b_(&Find(params, layer, "mlp.c_fc.bias")),
      mlp_proj_b_(&Find(params, layer, "mlp.c_proj.bias")),
      params_(),
      c_attn_(Find(params, layer, "attn.c_attn.weight"),
              Find(params, layer, "attn.c_attn.bias")),
      attn_proj_(Find(params, layer, "attn.c_proj.weight"),
                 Find(params, layer, "attn.c_proj.bias")),
      c_fc_(Find(params, layer, "mlp.c_fc.weight"),
            Find(params, layer, "mlp.c_fc.bias")),
      mlp_proj_(Find(params, layer, "mlp.c_proj.weight"),
                Find(params, layer, "mlp.c_proj.bias")) {
  TRELLIS_CHECK_EQ(config.n_head % tp.size, 0);
  for (const char* suffix :
       {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
        "mlp.c_proj.bias"}) {
    params_.push_back(&Find(params, layer, suffix));
  }
}

std::vector<Parameter*> Block::parameters() const { return params_; }

std::vector<Parameter*> Block::NormParameters() const {
  return {ln1_w_, ln1_b_, ln2_w_, ln2_b_};
}

std::vector<Block::Slot> Block::Slots(int64_t batch, DType dtype,
                                      Device device) const {
  const int64_t n = batch * seq_len_, c = d_model_, cl = local_width_;
  // Rows held here of the norms' inputs and statistics (N/tp under
  // sequence parallelism).
  const int64_t nl = rows_.Local(n);
  const DType stats = StatsDType(dtype);
  // The attention output and the GELU output are redone by both modes.
  const auto [input, cheap, grad] = Places();
  return {
      {&Tensors::ln1, {n, c}, dtype, input},
      {&Tensors::mean1, {nl}, stats, input},
      {&Tensors::rstd1, {nl}, stats, input},
      {&Tensors::qkv, {n, 3 * cl}, dtype, input},
      {&Tensors::att, {n, cl}, dtype, cheap},
      {&Tensors::saved,
       AttentionSavedShape(device, batch, seq_len_, local_heads_),
       // The CPU keeps probabilities (activations), CUDA row statistics.
       device.is_cpu() ? dtype : stats, cheap},
      {&Tensors::x2, {nl, c}, dtype, input},
      {&Tensors::ln2, {n, c}, dtype, input},
      {&Tensors::mean2, {nl}, stats, input},
      {&Tensors::rstd2, {nl}, stats, input},
      {&Tensors::fc, {n, 4 * cl}, dtype, input},
      {&Tensors::gelu, {n, 4 * cl}, dtype, cheap},
      // Without deferral the incoming gradient is read in place (gathered
      // into the workspace under sequence parallelism).
      {&Tensors::dy, {n, c}, dtype, DyPlace()},
      {&Tensors::dfc, {n, 4 * cl}, dtype, grad},
      {&Tensors::dln2, {n, c}, dtype, grad},
      {&Tensors::dx2, {n, c}, dtype, grad},
      {&Tensors::dqkv, {n, 3 * cl}, dtype, grad},
      {&Tensors::dln1, {n, c}, dtype, grad},
  };
}

void Block::ForwardActivations(Communicator& tp, const Tensor& x,
                               const Tensor& doc_start, Tensors& a,
                               Tensor& partial) const {
  const int64_t b = a.ln1.dim(0) / seq_len_;
  // Each norm writes this rank's rows of its output; the gather (sequence
  // parallel) completes them for the column-parallel layer.
  Tensor ln1 = rows_.Mine(a.ln1);
  LayerNormForward(x, ln1_w_->value, ln1_b_->value, ln1, a.mean1, a.rstd1);
  rows_.GatherInput(tp, a.ln1);
  c_attn_.Forward(a.ln1, a.qkv);
  Tensor att = a.att.View({b, seq_len_, local_width_});
  AttentionForward(a.qkv.View({b, seq_len_, 3 * local_width_}), doc_start,
                   local_heads_, local_heads_, att, a.saved,
                   options_.attention);
  rows_.RowOutput(tp, attn_proj_, a.att, partial, a.x2);
  // The residual add and ln_2 in one pass; c_fc with GELU in its epilogue.
  Tensor ln2 = rows_.Mine(a.ln2);
  AddLayerNormForward(a.x2, x, ln2_w_->value, ln2_b_->value, a.x2, ln2, a.mean2,
                      a.rstd2);
  rows_.GatherInput(tp, a.ln2);
  c_fc_.ForwardGelu(a.ln2, a.fc, a.gelu);
}

void Block::Forward(Communicator& tp, const Tensor& x, State& s,
                    Workspace& work) const {
  Tensors a = Use(s, work);
  ForwardActivations(tp, x, s.doc_start, a, work.partial);
  rows_.RowOutput(tp, mlp_proj_, a.gelu, work.partial, s.y);
  Add(s.y, a.x2, s.y);
}

void Block::Recompute(Communicator& tp, const Tensor& x,
                      const Tensor& doc_start, Tensors& a, Tensor& partial,
                      bool need_activation) const {
  switch (options_.recompute) {
    case Recompute::kNone:
      return;
    case Recompute::kFull:
      ForwardActivations(tp, x, doc_start, a, partial);
      return;
    case Recompute::kSelective: {
      const int64_t b = a.qkv.dim(0) / seq_len_;
      Tensor att = a.att.View({b, seq_len_, local_width_});
      AttentionForward(a.qkv.View({b, seq_len_, 3 * local_width_}), doc_start,
                       local_heads_, local_heads_, att, a.saved,
                       options_.attention);
      if (need_activation) GeluForward(a.fc, a.gelu);
      return;
    }
  }
}

void Block::BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                          State& s, Workspace& work, Tensor& dx) const {
  Tensors a = Use(s, work);
  const bool defer = options_.defer_weight_grads;
  Recompute(tp, x, s.doc_start, a, work.partial, /*need_activation=*/!defer);
  TakeOutputGrad(tp, dy, a);
  // Each gradient buffer is written, not zero-filled and added to; the
  // layers' input gradients are called as kernels here (the tp all-reduce
  // of a column-parallel layer's input gradient is CopyToTp's backward, a
  // reduce-scatter under sequence parallelism, leaving this rank's rows).
  // MLP: dy -> dfc (GELU's derivative in the GEMM's epilogue) -> dln2
  // (all-reduced) -> dx2 = dy + LayerNorm's input gradient.
  MatmulBackwardInputGelu(a.dy, mlp_proj_w_->value, a.fc, a.dfc);
  MatmulBackwardInput(a.dfc, c_fc_w_->value, a.dln2, WeightLayout::kInOut,
                      GradWrite::kWrite);
  rows_.ReduceInputGrad(tp, a.dln2);
  Tensor dx2 = rows_.Mine(a.dx2);
  LayerNormBackwardInputResidual(rows_.Mine(a.dln2), a.x2, ln2_w_->value,
                                 a.mean2, a.rstd2, rows_.Mine(a.dy), dx2);
  rows_.GatherOutputGrad(tp, dx2, a.dx2);
  // Attention: dx2 -> datt -> dqkv -> dln1 (all-reduced) -> dx.
  AttentionBackwardToQkv(attn_proj_w_->value, s.doc_start, 3 * local_width_,
                         local_heads_, local_heads_, a, work.datt);
  MatmulBackwardInput(a.dqkv, c_attn_w_->value, a.dln1, WeightLayout::kInOut,
                      GradWrite::kWrite);
  rows_.ReduceInputGrad(tp, a.dln1);
  if (!defer) WeightGradients(x, a);
  // Last: dx may be the buffer dy came in (the caller's ping-pong).
  LayerNormBackwardInputResidual(rows_.Mine(a.dln1), x, ln1_w_->value, a.mean1,
                                 a.rstd1, rows_.Mine(a.dx2), dx);
}

void Block::WeightGradients(const Tensor& x, const Tensors& a) const {
  // The four weight GEMMs, then every bias and LayerNorm parameter gradient
  // (column sums of the gradients above) in one ColumnSumsMany; with
  // bias_grad_epilogue the GEMMs form the bias gradients and the pass sums
  // only the LayerNorms'. The LayerNorms' sums run over this rank's rows (a
  // share under sequence parallelism, which then takes a launch of its
  // own); the biases' over the whole gathered gradients.
  Tensor no_bias;
  const Tensor dln2 = rows_.Mine(a.dln2), dln1 = rows_.Mine(a.dln1);
  const bool in_gemm = options_.bias_grad_epilogue;
  MatmulBackwardWeight(a.dy, a.gelu, mlp_proj_w_->grad,
                       in_gemm ? mlp_proj_b_->grad : no_bias);
  MatmulBackwardWeight(a.dfc, a.ln2, c_fc_w_->grad,
                       in_gemm ? c_fc_b_->grad : no_bias);
  MatmulBackwardWeight(a.dx2, a.att, attn_proj_w_->grad,
                       in_gemm ? attn_proj_b_->grad : no_bias);
  MatmulBackwardWeight(a.dqkv, a.ln1, c_attn_w_->grad,
                       in_gemm ? c_attn_b_->grad : no_bias);
  std::vector<ColumnSumJob> jobs;
  if (!in_gemm) {
    jobs = {{.dout = &a.dy, .db = &mlp_proj_b_->grad},
            {.dout = &a.dfc, .db = &c_fc_b_->grad},
            {.dout = &a.dx2, .db = &attn_proj_b_->grad},
            {.dout = &a.dqkv, .db = &c_attn_b_->grad}};
  }
  jobs.push_back({.dout = &dln2,
                  .x = &a.x2,
                  .mean = &a.mean2,
                  .rstd = &a.rstd2,
                  .dw = &ln2_w_->grad,
                  .db = &ln2_b_->grad});
  jobs.push_back({.dout = &dln1,
                  .x = &x,
                  .mean = &a.mean1,
                  .rstd = &a.rstd1,
                  .dw = &ln1_w_->grad,
                  .db = &ln1_b_->grad});
  ColumnSumsMany(jobs);
}

}  // namespace trellis
