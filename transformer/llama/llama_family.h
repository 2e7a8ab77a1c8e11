// The Llama model family behind the model seam (model_family.h): blocks of
// RMSNorm (norms.h), RoPE (rope_positions.h), grouped-query attention and
// a SwiGLU MLP (swiglu_mlp.h), no biases, the LM head tied to the
// embedding or not; parameters in llama_parameters.h, named as Hugging
// Face's Llama with fused projections (llama_hf.h maps them).
#ifndef TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_
#define TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_

#include "transformer/model_family.h"

namespace trellis {
namespace llama {

const ModelFamily& Family();

}  // namespace llama

inline const ModelFamily& LlamaFamily() { return llama::Family(); }

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_LLAMA_FAMILY_H_
