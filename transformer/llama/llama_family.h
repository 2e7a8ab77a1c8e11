// The Llama model family behind the model seam (model_family.h): blocks of
// RMSNorm (norms.h), RoPE (rope_positions.h), grouped-query attention and
// a SwiGLU MLP (swiglu_mlp.h), no biases, the LM head tied to the
// embedding or not; parameters in llama_parameters.h, named as Hugging
// Face's Llama with fused projections (llama_hf.h maps them).
#ifndef TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_
#define TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "transformer/model_family.h"

namespace trellis {
namespace llama {

const ModelFamily& Family();

// Llama's pieces, for families built on its blocks (transformer/moe/):
// its config rules (heads, RoPE, norms, the dense MLP's width), whether tp
// splits its attention's heads, a layer's block hooks but the MLP
// (parts.mlp null), its SwiGLU MLP of width `width` on this rank over the
// parameters under LlamaLayerName(layer, prefix) (AddLlamaMlp's), and the
// chunk's ends.
absl::Status ValidateLlamaConfig(const ModelConfig& config);
absl::Status CheckLlamaAttentionTp(const ModelConfig& config, int64_t tp);
BlockParts LlamaBlockParts(const ModelConfig& config, int64_t layer, TpPlace tp,
                           const ParameterSet& params);
std::shared_ptr<const BlockMlp> LlamaDenseMlp(int64_t width, int64_t layer,
                                              const std::string& prefix,
                                              const ParameterSet& params);
ChunkEnds LlamaEnds(const ModelConfig& config, const ChunkPlan& plan,
                    const ParameterSet& params);

}  // namespace llama

inline const ModelFamily& LlamaFamily() { return llama::Family(); }

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_
