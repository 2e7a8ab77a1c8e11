// LlamaChunk: a DecoderChunk (decoder_chunk.h) of Llama: the token
// embedding at the start (no learned positions), LlamaBlocks, the final
// RMSNorm and the LM head (the embedding when tied, else lm_head) at the
// end.
//
// Thread safety: none; one thread drives a chunk.
#ifndef TRELLIS_TRANSFORMER_LLAMA_CHUNK_H_
#define TRELLIS_TRANSFORMER_LLAMA_CHUNK_H_

#include <cstdint>

#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/decoder_chunk.h"

namespace trellis {

class LlamaChunk : public DecoderChunk {
 public:
  // `params` must already hold the chunk's parameters
  // (DeclareLlamaParameters, materialized).
  LlamaChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
             Communicator& tp_comm, const ParameterSet& params,
             int64_t micro_batch, Device device, DType dtype,
             BlockOptions options = {});
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_CHUNK_H_
