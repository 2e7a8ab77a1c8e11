// DecoderChunk's per-microbatch state, shared by the files that implement
// the chunk (decoder_chunk.cc: the blocks and the schedule's calls;
// decoder_chunk_ends.cc: the embedding and the head). Internal to them.
#ifndef TRELLIS_TRANSFORMER_DECODER_CHUNK_STATE_H_
#define TRELLIS_TRANSFORMER_DECODER_CHUNK_STATE_H_

#include <vector>

#include "framework/tensor.h"
#include "transformer/decoder_block.h"
#include "transformer/decoder_chunk.h"

namespace trellis {

// Nl: the rows held here, N/tp under sequence parallelism, else N.
struct DecoderChunk::State {
  Tensor ids, targets;  // (N) int32
  Tensor x0;            // (Nl, C) chunk input
  Tensor dx0;           // (N, C) gradient of the input (first chunk: for W)
  std::vector<DecoderBlock::State> blocks;
  Tensor meanf, rstdf;  // (Nl): the final norm's statistics (meanf if any)
  // (Nl, C): d(loss)/d(ln_f output), summed over tp; Forward fills it when
  // given a loss scale (then `has_dlnf`).
  Tensor dlnf;
  Tensor losses;  // (N) per-token losses
  bool has_dlnf = false;
  Tensor doc_start;       // (B, T) int32, with document masking
  Tensor loss_weight;     // (N) float32, with EOT loss masking (last chunk)
  bool weighted = false;  // Forward had loss weights
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_DECODER_CHUNK_STATE_H_
