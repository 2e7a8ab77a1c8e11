#include "transformer/gpt_decoder.h"

#include <utility>
#include <vector>

#include "framework/kernels/cached_attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/layernorm.h"
#include "parallel/tensor_parallel.h"
#include "transformer/cached_decoder.h"
#include "transformer/gpt_parameters.h"

namespace trellis {
namespace {

// ln_1 → c_attn → attention over the cache → c_proj (all-reduced) →
// residual → ln_2 → c_fc + GELU → mlp.c_proj (all-reduced) → residual.
class GptCachedBlock : public CachedBlock {
 public:
  GptCachedBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
                 const ParameterSet& params)
      : heads_(config.n_head / tp.size),
        head_dim_(config.head_dim()),
        d_model_(config.d_model),
        ln1_w_(P(params, layer, "ln_1.weight")),
        ln1_b_(P(params, layer, "ln_1.bias")),
        ln2_w_(P(params, layer, "ln_2.weight")),
        ln2_b_(P(params, layer, "ln_2.bias")),
        c_attn_(P(params, layer, "attn.c_attn.weight"),
                P(params, layer, "attn.c_attn.bias")),
        attn_proj_(P(params, layer, "attn.c_proj.weight"),
                   P(params, layer, "attn.c_proj.bias")),
        c_fc_(P(params, layer, "mlp.c_fc.weight"),
              P(params, layer, "mlp.c_fc.bias")),
        mlp_proj_(P(params, layer, "mlp.c_proj.weight"),
                  P(params, layer, "mlp.c_proj.bias")) {
    TRELLIS_CHECK_EQ(config.n_head % tp.size, 0);
  }

  int64_t kv_width() const override { return heads_ * head_dim_; }

  DecodeScratch NewScratch(int64_t rows, int64_t, DType dtype,
                           Device device) const override {
    const int64_t c = d_model_, cl = heads_ * head_dim_;
    const DType stats = StatsDType(dtype);
    DecodeScratch s;
    s.ln = Tensor::Empty({rows, c}, dtype, device);
    s.mean = Tensor::Empty({rows}, stats, device);
    s.rstd = Tensor::Empty({rows}, stats, device);
    s.qkv = Tensor::Empty({rows, 3 * cl}, dtype, device);
    s.att = Tensor::Empty({rows, cl}, dtype, device);
    s.x2 = Tensor::Empty({rows, c}, dtype, device);
    s.fc = Tensor::Empty({rows, 4 * cl}, dtype, device);
    s.act = Tensor::Empty({rows, 4 * cl}, dtype, device);
    s.y = Tensor::Empty({rows, c}, dtype, device);
    return s;
  }

  void Forward(Communicator& tp, int64_t start, Tensor& x, Tensor& keys,
               Tensor& values, DecodeScratch& s) const override {
    const int64_t n = x.dim(0);
    Tensor ln = s.ln.Narrow(0, n), mean = s.mean.Narrow(0, n),
           rstd = s.rstd.Narrow(0, n), qkv = s.qkv.Narrow(0, n),
           att = s.att.Narrow(0, n), x2 = s.x2.Narrow(0, n),
           fc = s.fc.Narrow(0, n), act = s.act.Narrow(0, n),
           y = s.y.Narrow(0, n);
    LayerNormForward(x, ln1_w_.value, ln1_b_.value, ln, mean, rstd);
    c_attn_.Forward(ln, qkv);
    CachedAttentionForward(qkv, heads_, heads_, start, keys, values, att);
    attn_proj_.Forward(tp, att, x2);
    AddLayerNormForward(x2, x, ln2_w_.value, ln2_b_.value, x2, ln, mean, rstd);
    c_fc_.ForwardGelu(ln, fc, act);
    mlp_proj_.Forward(tp, act, y);
    Add(y, x2, x);
  }

 private:
  static Parameter& P(const ParameterSet& params, int64_t layer,
                      const char* suffix) {
    return params.Get(LayerParameterName(layer, suffix));
  }

  int64_t heads_, head_dim_, d_model_;
  const Parameter& ln1_w_;
  const Parameter& ln1_b_;
  const Parameter& ln2_w_;
  const Parameter& ln2_b_;
  ColumnParallelLinear c_attn_;
  RowParallelLinear attn_proj_;
  ColumnParallelLinear c_fc_;
  RowParallelLinear mlp_proj_;
};

}  // namespace

std::unique_ptr<ModelDecoder> NewGptDecoder(const ModelConfig& config,
                                            const DecoderSetup& setup) {
  const ParameterSet& params = *setup.params;
  ChunkEnds ends;
  ends.embedding = &params.Get("wte");
  ends.positions = &params.Get("wpe");
  ends.norm_weight = &params.Get("ln_f.weight");
  ends.norm_bias = &params.Get("ln_f.bias");
  ends.head = ends.embedding;
  std::vector<std::unique_ptr<CachedBlock>> blocks;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    blocks.push_back(
        std::make_unique<GptCachedBlock>(config, l, setup.tp, params));
  }
  return std::make_unique<CachedDecoder>(config, setup, ends,
                                         std::move(blocks));
}

}  // namespace trellis
