// Llama's cached forward for generation (model_decoder.h): its block over a
// key/value cache, the same math as LlamaBlock's forward (llama_block.h)
// with q and k rotated by the angles of the new tokens' positions and the
// attention over the cache (grouped-query: Hkv/tp key/value heads cached
// per rank), and the CachedDecoder of the whole Llama model (no learned
// positions; final RMSNorm; head tied to the embedding or lm_head).
#ifndef TRELLIS_TRANSFORMER_LLAMA_DECODER_H_
#define TRELLIS_TRANSFORMER_LLAMA_DECODER_H_

#include <memory>

#include "transformer/config.h"
#include "transformer/model_decoder.h"

namespace trellis {

// REQUIRES: setup.params holds the whole model on rank setup.tp.rank.
std::unique_ptr<ModelDecoder> NewLlamaDecoder(const ModelConfig& config,
                                              const DecoderSetup& setup);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_DECODER_H_
