// The cached forward of text generation, the part of the model seam
// (model_family.h) that inference uses: ModelFamily::NewDecoder builds a
// ModelDecoder of the whole model on one tensor-parallel rank.
//
// A ModelDecoder runs new tokens of one sequence at the next positions:
// Forward(prompt) prefills, then Forward({token}) decodes one token at a
// time; each call appends the tokens' keys and values to the decoder's
// KvCache (transformer/kv_cache.h), attends over everything cached, and
// returns the next-token logits of the last new token over the whole
// vocabulary. Positions follow the family: learned position rows (GPT-2's
// wpe) or RoPE angles (Llama) of the token's place in the sequence.
//
// The logits equal those of the training forward (DecoderChunk) on the same
// sequence to float rounding, on every tensor-parallel layout: tp ranks
// split heads and MLP columns as in training (two all-reduces per block),
// and the vocab-parallel logits are all-gathered, so every rank returns the
// same logits.
//
// Every family's decoder is a CachedDecoder (cached_decoder.h): the
// embedding, the family's blocks (CachedBlock, cached_block.h) and the head.
//
// Thread safety: none; one thread drives a decoder. Every rank of the tp
// group calls Forward with the same tokens.
#ifndef TRELLIS_TRANSFORMER_MODEL_DECODER_H_
#define TRELLIS_TRANSFORMER_MODEL_DECODER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/expert_bias.h"

namespace trellis {

class ModelDecoder {
 public:
  virtual ~ModelDecoder() = default;

  // Runs `tokens` (ids < vocab_size) at positions [length(), length() + n)
  // and returns the logits (vocab_size, float32, host) that follow the
  // last of them. REQUIRES: 0 < n <= capacity() - length().
  virtual std::vector<float> Forward(std::span<const int32_t> tokens) = 0;
  // Tokens run since construction or the last Reset.
  virtual int64_t length() const = 0;
  // The most tokens a sequence may hold: the model's context (seq_len).
  virtual int64_t capacity() const = 0;
  // Forgets the sequence.
  virtual void Reset() = 0;
  // Bytes of the key/value cache.
  virtual size_t CacheBytes() const = 0;
  // Sets its routers' selection biases to their layers' rows of the
  // model's table (a missing row: zeros), as ModelChunk::SetExpertBias.
  virtual void SetExpertBias(const ExpertBias& /*bias*/) {}
};

// What a decoder is built from: the whole model's parameters on tp rank
// tp.rank (declared for ChunkPlan{0, n_layer, true, true} and
// materialized), and the activations' dtype and device.
struct DecoderSetup {
  TpPlace tp;
  Communicator* tp_comm = nullptr;
  const ParameterSet* params = nullptr;
  Device device;
  DType dtype = DType::kF32;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MODEL_DECODER_H_
