#include "transformer/llama/llama_hf.h"

#include <string>

#include "transformer/llama/llama_parameters.h"

namespace trellis {

void AddLlamaHfMlp(const ModelConfig& c, int64_t layer,
                   const std::string& prefix, int64_t width,
                   std::vector<HfTensorMapping>& rows) {
  const int64_t d = c.d_model, f = width;
  const std::string name = LlamaLayerName(layer, prefix.c_str());
  rows.push_back(
      {name + "gate_up_proj.weight",
       {d, 2 * f},
       {{name + "gate_proj.weight", {f, d}}, {name + "up_proj.weight", {f, d}}},
       true});
  rows.push_back({name + "down_proj.weight",
                  {f, d},
                  {{name + "down_proj.weight", {d, f}}},
                  true});
}

std::vector<HfTensorMapping> LlamaHfTensors(const ModelConfig& c,
                                            const LlamaHfMlp& mlp) {
  const int64_t d = c.d_model, hd = c.HeadDim();
  const int64_t q = c.n_head * hd, kv = c.kv_heads() * hd;
  auto same = [](const std::string& name, Shape shape) {
    return HfSame(name, shape, name);
  };
  std::vector<HfTensorMapping> m = {same(kLlamaEmbedding, {c.vocab_size, d})};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    auto name = [&](const char* suffix) { return LlamaLayerName(l, suffix); };
    m.push_back(same(name("input_layernorm.weight"), {d}));
    m.push_back({name("self_attn.qkv_proj.weight"),
                 {d, q + 2 * kv},
                 {{name("self_attn.q_proj.weight"), {q, d}},
                  {name("self_attn.k_proj.weight"), {kv, d}},
                  {name("self_attn.v_proj.weight"), {kv, d}}},
                 true});
    m.push_back({name("self_attn.o_proj.weight"),
                 {q, d},
                 {{name("self_attn.o_proj.weight"), {d, q}}},
                 true});
    if (c.qk_norm) {
      m.push_back(same(name("self_attn.q_norm.weight"), {hd}));
      m.push_back(same(name("self_attn.k_norm.weight"), {hd}));
    }
    m.push_back(same(name("post_attention_layernorm.weight"), {d}));
    if (mlp) {
      mlp(l, m);
    } else {
      AddLlamaHfMlp(c, l, "mlp.", c.LlamaFfnHidden(), m);
    }
  }
  m.push_back(same(kLlamaNorm, {d}));
  if (!c.tie_embeddings) m.push_back(same(kLlamaHead, {c.vocab_size, d}));
  return m;
}

}  // namespace trellis
