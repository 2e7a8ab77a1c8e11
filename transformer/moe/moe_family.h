// The mixture-of-experts family behind the model seam (model_family.h):
// Llama's blocks (RMSNorm, RoPE, grouped-query attention; the "llama:"
// options) whose MLP is, in the layers IsMoeLayer names, a mixture of
// experts (moe_mlp.h; the "moe:" options): Mixtral's and Qwen3-MoE's
// arithmetic. Parameters in moe_parameters.h, mapped to Hugging Face's
// Qwen3-MoE names by moe_hf.h.
#ifndef TRELLIS_TRANSFORMER_MOE_MOE_FAMILY_H_
#define TRELLIS_TRANSFORMER_MOE_MOE_FAMILY_H_

#include "transformer/model_family.h"

namespace trellis {
namespace moe {

inline constexpr ModelFamilyKind kKind{"moe"};

const ModelFamily& Family();

}  // namespace moe
}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MOE_MOE_FAMILY_H_
