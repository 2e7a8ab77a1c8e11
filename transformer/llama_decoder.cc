#include "transformer/llama_decoder.h"

#include <utility>
#include <vector>

#include "framework/kernels/cached_attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/rmsnorm.h"
#include "framework/kernels/rope.h"
#include "framework/kernels/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "transformer/cached_decoder.h"
#include "transformer/llama_parameters.h"

namespace trellis {
namespace {

// RMSNorm → qkv_proj → RoPE at the tokens' positions → attention over the
// cache → o_proj (all-reduced) → residual → RMSNorm → gate_up_proj →
// SwiGLU → down_proj (all-reduced) → residual.
class LlamaCachedBlock : public CachedBlock {
 public:
  LlamaCachedBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
                   const ParameterSet& params)
      : config_(config),
        heads_(config.n_head / tp.size),
        kv_heads_(LlamaLocalKvHeads(config, tp.size)),
        head_dim_(config.head_dim()),
        ffn_(config.LlamaFfnHidden() / tp.size),
        norm1_(P(params, layer, "input_layernorm.weight")),
        norm2_(P(params, layer, "post_attention_layernorm.weight")),
        qkv_proj_(P(params, layer, "self_attn.qkv_proj.weight")),
        o_proj_(P(params, layer, "self_attn.o_proj.weight")),
        gate_up_proj_(P(params, layer, "mlp.gate_up_proj.weight")),
        down_proj_(P(params, layer, "mlp.down_proj.weight")) {
    TRELLIS_CHECK_EQ(config.n_head % tp.size, 0);
    // Key/value heads split over tp, or replicated when tp exceeds them, as
    // in training (LlamaFamily::CheckTensorParallel).
    TRELLIS_CHECK(config.kv_heads() % tp.size == 0 ||
                  tp.size % config.kv_heads() == 0)
        << config.kv_heads() << " key/value heads over tp " << tp.size;
    TRELLIS_CHECK_EQ(config.LlamaFfnHidden() % tp.size, 0);
  }

  int64_t kv_width() const override { return kv_heads_ * head_dim_; }

  DecodeScratch NewScratch(int64_t rows, int64_t capacity, DType dtype,
                           Device device) const override {
    const int64_t c = config_.d_model;
    DecodeScratch s;
    s.ln = Tensor::Empty({rows, c}, dtype, device);
    s.rstd = Tensor::Empty({rows}, StatsDType(dtype), device);
    s.qkv = Tensor::Empty({rows, (heads_ + 2 * kv_heads_) * head_dim_}, dtype,
                          device);
    s.att = Tensor::Empty({rows, heads_ * head_dim_}, dtype, device);
    s.x2 = Tensor::Empty({rows, c}, dtype, device);
    s.fc = Tensor::Empty({rows, 2 * ffn_}, dtype, device);
    s.act = Tensor::Empty({rows, ffn_}, dtype, device);
    s.y = Tensor::Empty({rows, c}, dtype, device);
    // As LlamaBlock's tables: the activations' dtype on the CPU, float32
    // on CUDA.
    const DType table = device.is_cpu() ? dtype : DType::kF32;
    absl::StatusOr<RopeTables> t = RopeTable(
        head_dim_, capacity, config_.rope_theta, config_.Scaling(), table);
    TRELLIS_CHECK(t.ok()) << t.status();  // ModelConfig::Validate checked it.
    s.cos = t->cos.To(device);
    s.sin = t->sin.To(device);
    return s;
  }

  void Forward(Communicator& tp, int64_t start, Tensor& x, Tensor& keys,
               Tensor& values, DecodeScratch& s) const override {
    const int64_t n = x.dim(0);
    const double eps = config_.norm_eps;
    Tensor ln = s.ln.Narrow(0, n), rstd = s.rstd.Narrow(0, n),
           qkv = s.qkv.Narrow(0, n), att = s.att.Narrow(0, n),
           x2 = s.x2.Narrow(0, n), fc = s.fc.Narrow(0, n),
           act = s.act.Narrow(0, n), y = s.y.Narrow(0, n);
    RmsNormForward(x, norm1_.value, eps, ln, rstd);
    qkv_proj_.Forward(ln, qkv);
    // The kernel rotates row r by the angle of table row r mod n: the
    // tables from `start` on give the tokens' positions.
    Tensor rows = qkv.View({1, n, qkv.dim(1)});
    RopeForward(rows, heads_, kv_heads_, s.cos.Narrow(start, n),
                s.sin.Narrow(start, n));
    CachedAttentionForward(qkv, heads_, kv_heads_, start, keys, values, att);
    o_proj_.Forward(tp, att, x2);
    AddRmsNormForward(x2, x, norm2_.value, eps, x2, ln, rstd);
    gate_up_proj_.Forward(ln, fc);
    SwiGluForward(fc, act);
    down_proj_.Forward(tp, act, y);
    Add(y, x2, x);
  }

 private:
  static Parameter& P(const ParameterSet& params, int64_t layer,
                      const char* suffix) {
    return params.Get(LlamaLayerName(layer, suffix));
  }

  ModelConfig config_;
  int64_t heads_, kv_heads_, head_dim_, ffn_;
  const Parameter& norm1_;
  const Parameter& norm2_;
  ColumnParallelLinear qkv_proj_;
  RowParallelLinear o_proj_;
  ColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace

std::unique_ptr<ModelDecoder> NewLlamaDecoder(const ModelConfig& config,
                                              const DecoderSetup& setup) {
  const ParameterSet& params = *setup.params;
  ChunkEnds ends;
  ends.embedding = &params.Get(kLlamaEmbedding);
  ends.norm_weight = &params.Get(kLlamaNorm);
  ends.norm_eps = config.norm_eps;
  ends.head = &params.Get(config.tie_embeddings ? kLlamaEmbedding : kLlamaHead);
  std::vector<std::unique_ptr<CachedBlock>> blocks;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks.push_back(
        std::make_unique<LlamaCachedBlock>(config, l, setup.tp, params));
  }
  return std::make_unique<CachedDecoder>(config, setup, ends,
                                         std::move(blocks));
}

}  // namespace trellis
