// The Llama parameters of one model chunk on one rank: logical names and
// shapes, how tensor parallelism cuts them, and their initialization.
//
// Names follow Hugging Face's Llama state dict; the projections are fused
// and stored (in, out) as GPT-2's are, so conversion maps them as follows
// (HF's nn.Linear weights are (out, in); ᵀ transposes, | joins columns):
//   model.embed_tokens.weight (V, C)               = HF, unchanged
//   model.layers.{i}.input_layernorm.weight (C)    = HF
//   model.layers.{i}.self_attn.qkv_proj.weight (C, (H + 2·Hkv)·D)
//       = q_proj.weightᵀ | k_proj.weightᵀ | v_proj.weightᵀ
//   model.layers.{i}.self_attn.o_proj.weight (H·D, C) = o_proj.weightᵀ
//   model.layers.{i}.post_attention_layernorm.weight (C) = HF
//   model.layers.{i}.mlp.gate_up_proj.weight (C, 2·F)
//       = gate_proj.weightᵀ | up_proj.weightᵀ
//   model.layers.{i}.mlp.down_proj.weight (F, C)   = down_proj.weightᵀ
//   model.norm.weight (C)                          = HF
//   lm_head.weight (V, C), untied models only      = HF, unchanged
// HF's q_proj and k_proj rows are already in the rotate-half order the RoPE
// kernel uses (framework/kernels/rope.h): no permutation.
//
// Tensor parallelism: qkv_proj's columns are three unequal blocks [Q | K |
// V] (H·D, Hkv·D, Hkv·D), each split over tp, so a rank holds H/tp query
// and Hkv/tp key/value heads (tp must divide both). When tp exceeds Hkv (a
// multiple of it), K and V are cut into Hkv pieces only, each replicated
// over tp/Hkv ranks: rank r holds key/value head r·Hkv/tp, the one its
// query heads use (LlamaLocalKvHeads); gate_up_proj's columns
// are two equal blocks [gate | up] split each; o_proj and down_proj are
// row-parallel; the embedding and lm_head are split by vocabulary rows
// (padded in memory as GPT-2's wte); norms are replicated. No biases.
//
// Initialization, a function of (seed, logical name, logical index) only:
// embed_tokens, qkv_proj, gate_up_proj, lm_head N(0, 0.02); o_proj and
// down_proj N(0, 0.02 / sqrt(2 · n_layer)); norm weights 1.
#ifndef TRELLIS_TRANSFORMER_LLAMA_LLAMA_PARAMETERS_H_
#define TRELLIS_TRANSFORMER_LLAMA_LLAMA_PARAMETERS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/parameter_adder.h"

namespace trellis {

// The tied (or input) embedding and the untied head's names.
inline constexpr char kLlamaEmbedding[] = "model.embed_tokens.weight";
inline constexpr char kLlamaHead[] = "lm_head.weight";
inline constexpr char kLlamaNorm[] = "model.norm.weight";

// Declares one layer's MLP (a family built on Llama's blocks with an MLP
// of its own: transformer/moe/).
using LlamaMlpDeclarer =
    std::function<void(int64_t layer, ParameterAdder& add)>;

// Declares the chunk's parameters in `params` (reusing the embedding when
// the head is tied and this rank already holds it); each layer's MLP by
// `mlp`, Llama's own (AddLlamaMlp) when null.
void DeclareLlamaParameters(const ModelConfig& config, const ChunkPlan& plan,
                            TpPlace tp, uint64_t seed, Device device,
                            DType dtype, ParameterSet& params,
                            const LlamaMlpDeclarer& mlp = nullptr);
// Llama's SwiGLU MLP of layer `layer` (gate_up_proj and down_proj), of
// width `width` (LlamaFfnHidden for Llama's own) under `prefix` ("mlp.",
// "mlp.experts.3."). Initialization as the header says.
void AddLlamaMlp(const ModelConfig& config, int64_t layer,
                 const std::string& prefix, int64_t width, ParameterAdder& add);

// Key/value heads a tp rank holds: Hkv/tp, or 1 when tp exceeds Hkv (the
// heads replicated over tp/Hkv ranks each).
int64_t LlamaLocalKvHeads(const ModelConfig& config, int64_t tp);

// "model.layers.<layer>.<suffix>".
std::string LlamaLayerName(int64_t layer, const char* suffix);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_LLAMA_PARAMETERS_H_
