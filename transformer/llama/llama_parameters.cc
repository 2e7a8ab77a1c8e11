#include "transformer/llama/llama_parameters.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transformer/parameter_adder.h"

namespace trellis {
namespace {

void AddLlamaLayer(const ModelConfig& config, int64_t layer,
                   const LlamaMlpDeclarer& mlp, ParameterAdder& add) {
  const int64_t c = config.d_model, d = config.HeadDim();
  const double std = 0.02;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  auto name = [&](const char* suffix) { return LlamaLayerName(layer, suffix); };
  add.Replicated(name("input_layernorm.weight"), {c}, false, 0, 1.0);
  // Key/value heads fewer than tp ranks: K and V cut into one piece per
  // head, each replicated over tp / kv ranks.
  const int64_t kv = config.kv_heads();
  std::vector<int64_t> pieces;
  if (kv < add.tp.size) pieces = {add.tp.size, kv, kv};
  add.ColumnGroups(name("self_attn.qkv_proj"), c,
                   {config.n_head * d, kv * d, kv * d}, std, std::move(pieces));
  add.Row(name("self_attn.o_proj"), config.n_head * d, c, proj_std,
          /*with_bias=*/false);
  if (config.qk_norm) {
    add.Replicated(name("self_attn.q_norm.weight"), {d}, false, 0, 1.0);
    add.Replicated(name("self_attn.k_norm.weight"), {d}, false, 0, 1.0);
  }
  add.Replicated(name("post_attention_layernorm.weight"), {c}, false, 0, 1.0);
  if (mlp) {
    mlp(layer, add);
  } else {
    AddLlamaMlp(config, layer, "mlp.", config.LlamaFfnHidden(), add);
  }
}

}  // namespace

void AddLlamaMlp(const ModelConfig& config, int64_t layer,
                 const std::string& prefix, int64_t width,
                 ParameterAdder& add) {
  const int64_t c = config.d_model;
  const double proj_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  const std::string name = LlamaLayerName(layer, prefix.c_str());
  add.Column(name + "gate_up_proj", c, 2 * width, /*groups=*/2, 0.02,
             /*with_bias=*/false);
  add.Row(name + "down_proj", width, c, proj_std, /*with_bias=*/false);
}

int64_t LlamaLocalKvHeads(const ModelConfig& config, int64_t tp) {
  const int64_t kv = config.kv_heads();
  return kv < tp ? 1 : kv / tp;
}

std::string LlamaLayerName(int64_t layer, const char* suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

void DeclareLlamaParameters(const ModelConfig& config, const ChunkPlan& plan,
                            TpPlace tp, uint64_t seed, Device device,
                            DType dtype, ParameterSet& params,
                            const LlamaMlpDeclarer& mlp) {
  ParameterAdder add{params, tp, seed, device, dtype};
  const int64_t c = config.d_model;
  const bool tied = config.tie_embeddings;
  const bool needs_embedding = plan.has_embedding || (tied && plan.has_head);
  if (needs_embedding && !params.Find(kLlamaEmbedding)) {
    Parameter& e = add.Vocab(kLlamaEmbedding, config.vocab_size, c, 0.02);
    // A tied embedding counts once: where the lookup lives.
    e.primary = plan.has_embedding;
  } else if (plan.has_embedding) {
    params.Find(kLlamaEmbedding)->primary = true;
  }
  for (int64_t l = plan.first_layer; l < plan.first_layer + plan.num_layers;
       ++l) {
    AddLlamaLayer(config, l, mlp, add);
  }
  if (plan.has_head) {
    add.Replicated(kLlamaNorm, {c}, false, 0, 1.0);
    if (!tied) add.Vocab(kLlamaHead, config.vocab_size, c, 0.02);
  }
}

}  // namespace trellis
