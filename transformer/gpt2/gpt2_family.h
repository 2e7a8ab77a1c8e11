// The GPT-2 model family behind the model seam (model_family.h): pre-LN
// blocks of LayerNorm (norms.h) and a GELU MLP (gelu_mlp.h) with biases,
// learned positions (wpe, added at the embedding), the LM head tied to
// wte; parameters in gpt2_parameters.h, named as Hugging Face's GPT-2.
#ifndef TRELLIS_TRANSFORMER_GPT2_GPT2_FAMILY_H_
#define TRELLIS_TRANSFORMER_GPT2_GPT2_FAMILY_H_

#include "transformer/model_family.h"

namespace trellis {
namespace gpt2 {

const ModelFamily& Family();

}  // namespace gpt2

inline const ModelFamily& Gpt2Family() { return gpt2::Family(); }

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT2_GPT2_FAMILY_H_
