// GptChunk: a DecoderChunk (decoder_chunk.h) of GPT-2: wte and wpe at the
// start, GPT-2 Blocks, ln_f (LayerNorm) and the head tied to wte at the end.
//
// Thread safety: none; one thread drives a chunk.
#ifndef TRELLIS_TRANSFORMER_GPT_CHUNK_H_
#define TRELLIS_TRANSFORMER_GPT_CHUNK_H_

#include <cstdint>

#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/decoder_chunk.h"

namespace trellis {

class GptChunk : public DecoderChunk {
 public:
  // `params` must already hold the chunk's parameters (DeclareGptParameters,
  // materialized).
  GptChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
           Communicator& tp_comm, const ParameterSet& params,
           int64_t micro_batch, Device device, DType dtype,
           BlockOptions options = {});
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT_CHUNK_H_
