// The GPT-2 model family (pre-LN blocks of block.h, learned positions, tied
// LM head: gpt_chunk.h, gpt_parameters.h) behind the model seam.
#ifndef TRELLIS_TRANSFORMER_GPT_FAMILY_H_
#define TRELLIS_TRANSFORMER_GPT_FAMILY_H_

#include "transformer/model_family.h"

namespace trellis {

const ModelFamily& Gpt2Family();

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT_FAMILY_H_
