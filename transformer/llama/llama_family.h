// The Llama model family (RMSNorm, RoPE, grouped-query attention, SwiGLU
// MLP, optionally untied head: llama_block.h, llama_chunk.h,
// llama_parameters.h) behind the model seam.
#ifndef TRELLIS_TRANSFORMER_LLAMA_FAMILY_H_
#define TRELLIS_TRANSFORMER_LLAMA_FAMILY_H_

#include "transformer/model_family.h"

namespace trellis {

const ModelFamily& LlamaFamily();

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_FAMILY_H_
