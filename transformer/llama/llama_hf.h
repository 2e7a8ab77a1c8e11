// Llama's Hugging Face mapping table (hf_mapping.h). HF's nn.Linear
// weights are (out, in); trellis stores (in, out) and fuses projections:
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight (untied
//   models only) and each layer's norms: unchanged
//   self_attn.qkv_proj.weight = [q_proj; k_proj; v_proj]ᵀ
//   self_attn.o_proj.weight   = o_proj.weightᵀ
//   mlp.gate_up_proj.weight   = [gate_proj; up_proj]ᵀ
//   mlp.down_proj.weight      = down_proj.weightᵀ
// HF's q_proj and k_proj rows are already in the rotate-half order the RoPE
// kernel uses (framework/kernels/rope.h): no permutation.
#ifndef TRELLIS_TRANSFORMER_LLAMA_LLAMA_HF_H_
#define TRELLIS_TRANSFORMER_LLAMA_LLAMA_HF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "transformer/config.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// Adds the rows of one layer's MLP to `rows` (a family built on Llama's
// blocks with an MLP of its own: transformer/moe/).
using LlamaHfMlp =
    std::function<void(int64_t layer, std::vector<HfTensorMapping>& rows)>;

// In DeclareLlamaParameters' order for the whole model, each layer's MLP
// by `mlp` (Llama's own, AddLlamaHfMlp, when null).
std::vector<HfTensorMapping> LlamaHfTensors(const ModelConfig& config,
                                            const LlamaHfMlp& mlp = nullptr);
// The rows of a SwiGLU MLP of width `width` under LlamaLayerName(layer,
// prefix): gate_up_proj = [gate_proj; up_proj]ᵀ, down_proj = down_projᵀ.
void AddLlamaHfMlp(const ModelConfig& config, int64_t layer,
                   const std::string& prefix, int64_t width,
                   std::vector<HfTensorMapping>& rows);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_LLAMA_HF_H_
