// GPT-2's cached forward for generation (model_decoder.h): its block over
// a key/value cache, the same math as Block's forward (block.h) with the
// attention of the new tokens over the cache, and the CachedDecoder of the
// whole GPT-2 model (wte + wpe rows of the tokens' positions, ln_f, head
// tied to wte).
#ifndef TRELLIS_TRANSFORMER_GPT_DECODER_H_
#define TRELLIS_TRANSFORMER_GPT_DECODER_H_

#include <memory>

#include "transformer/config.h"
#include "transformer/model_decoder.h"

namespace trellis {

// REQUIRES: setup.params holds the whole model on rank setup.tp.rank.
std::unique_ptr<ModelDecoder> NewGptDecoder(const ModelConfig& config,
                                            const DecoderSetup& setup);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT_DECODER_H_
