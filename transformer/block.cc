#include "transformer/block.h"

#include "framework/kernels/attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"

namespace trellis {
namespace {

Parameter& Find(const ParameterSet& params, int64_t layer, const char* suffix) {
  Parameter* p = params.Find(LayerParameterName(layer, suffix));
  TRELLIS_CHECK(p != nullptr) << LayerParameterName(layer, suffix);
  return *p;
}

}  // namespace

Block::Block(const GptConfig& config, int64_t layer, TpPlace tp,
             const ParameterSet& params)
    : layer_(layer),
      seq_len_(config.seq_len),
      d_model_(config.d_model),
      local_heads_(config.n_head / tp.size),
      local_width_(config.n_head / tp.size * config.head_dim()),
      ln1_w_(&Find(params, layer, "ln_1.weight")),
      ln1_b_(&Find(params, layer, "ln_1.bias")),
      ln2_w_(&Find(params, layer, "ln_2.weight")),
      ln2_b_(&Find(params, layer, "ln_2.bias")),
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

Block::State Block::NewState(int64_t batch, DType dtype, Device device) const {
  const int64_t n = batch * seq_len_, c = d_model_, cl = local_width_;
  auto make = [&](Shape shape) { return Tensor::Empty(shape, dtype, device); };
  State s;
  s.ln1 = make({n, c});
  s.mean1 = make({n});
  s.rstd1 = make({n});
  s.qkv = make({n, 3 * cl});
  s.att = make({n, cl});
  s.saved = make(AttentionSavedShape(device, batch, seq_len_, local_heads_));
  s.x2 = make({n, c});
  s.ln2 = make({n, c});
  s.mean2 = make({n});
  s.rstd2 = make({n});
  s.fc = make({n, 4 * cl});
  s.gelu = make({n, 4 * cl});
  s.y = make({n, c});
  s.dy = make({n, c});
  s.dfc = make({n, 4 * cl});
  s.dln2 = make({n, c});
  s.dx2 = make({n, c});
  s.dqkv = make({n, 3 * cl});
  s.dln1 = make({n, c});
  return s;
}

Block::Workspace Block::NewWorkspace(int64_t batch, DType dtype,
                                     Device device) const {
  const int64_t n = batch * seq_len_;
  return Workspace{Tensor::Empty({n, 4 * local_width_}, dtype, device),
                   Tensor::Empty({n, local_width_}, dtype, device)};
}

void Block::Forward(Communicator& tp, const Tensor& x, State& s) const {
  const int64_t n = x.dim(0);
  LayerNormForward(x, ln1_w_->value, ln1_b_->value, s.ln1, s.mean1, s.rstd1);
  c_attn_.Forward(s.ln1, s.qkv);
  const int64_t b = n / seq_len_;
  Tensor att = s.att.View({b, seq_len_, local_width_});
  AttentionForward(s.qkv.View({b, seq_len_, 3 * local_width_}), local_heads_,
                   att, s.saved);
  attn_proj_.Forward(tp, s.att, s.x2);
  Add(s.x2, x, s.x2);
  LayerNormForward(s.x2, ln2_w_->value, ln2_b_->value, s.ln2, s.mean2, s.rstd2);
  c_fc_.Forward(s.ln2, s.fc);
  GeluForward(s.fc, s.gelu);
  mlp_proj_.Forward(tp, s.gelu, s.y);
  Add(s.y, s.x2, s.y);
}

void Block::BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                          State& s, Workspace& work, Tensor& dx) const {
  const int64_t n = x.dim(0);
  s.dy.CopyFrom(dy);
  // MLP: dy -> dgelu -> dfc -> dln2 (all-reduced) -> dx2.
  work.dgelu.Zero();
  mlp_proj_.BackwardInput(s.dy, work.dgelu);
  s.dfc.Zero();
  GeluBackward(s.fc, work.dgelu, s.dfc);
  s.dln2.Zero();
  c_fc_.BackwardInput(tp, s.dfc, s.dln2);
  s.dx2.CopyFrom(s.dy);
  LayerNormBackwardInput(s.dln2, s.x2, ln2_w_->value, s.mean2, s.rstd2, s.dx2);
  // Attention: dx2 -> datt -> dqkv -> dln1 (all-reduced) -> dx.
  work.datt.Zero();
  attn_proj_.BackwardInput(s.dx2, work.datt);
  s.dqkv.Zero();
  const int64_t b = n / seq_len_;
  const Shape qkv_shape = {b, seq_len_, 3 * local_width_};
  const Shape att_shape = {b, seq_len_, local_width_};
  Tensor dqkv = s.dqkv.View(qkv_shape);
  AttentionBackward(work.datt.View(att_shape), s.qkv.View(qkv_shape),
                    s.att.View(att_shape), s.saved, local_heads_, dqkv);
  s.dln1.Zero();
  c_attn_.BackwardInput(tp, s.dqkv, s.dln1);
  dx.CopyFrom(s.dx2);
  LayerNormBackwardInput(s.dln1, x, ln1_w_->value, s.mean1, s.rstd1, dx);
}

void Block::BackwardWeight(const Tensor& x, const State& s) const {
  mlp_proj_.BackwardWeight(s.dy, s.gelu);
  c_fc_.BackwardWeight(s.dfc, s.ln2);
  LayerNormBackwardWeight(s.dln2, s.x2, s.mean2, s.rstd2, ln2_w_->grad,
                          ln2_b_->grad);
  attn_proj_.BackwardWeight(s.dx2, s.att);
  c_attn_.BackwardWeight(s.dqkv, s.ln1);
  LayerNormBackwardWeight(s.dln1, x, s.mean1, s.rstd1, ln1_w_->grad,
                          ln1_b_->grad);
}

}  // namespace trellis
