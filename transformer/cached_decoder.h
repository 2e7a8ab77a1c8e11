// CachedDecoder: the ModelDecoder (model_decoder.h) every family shares: the
// vocab-parallel token embedding (plus learned positions where the family
// has them), CachedBlocks of the family's hooks over a KvCache, and the final
// norm and LM head on the last new token, whose vocab-parallel logits are
// all-gathered over tp.
//
// Buffers are sized once for the whole context (capacity rows), so a
// forward allocates nothing but the logits it returns.
//
// Thread safety: none; one thread drives a decoder.
#ifndef TRELLIS_TRANSFORMER_CACHED_DECODER_H_
#define TRELLIS_TRANSFORMER_CACHED_DECODER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "transformer/cached_block.h"
#include "transformer/config.h"
#include "transformer/decoder_chunk.h"
#include "transformer/kv_cache.h"
#include "transformer/model_decoder.h"

namespace trellis {

class CachedDecoder : public ModelDecoder {
 public:
  // The whole model of config's family (FamilyOf(config): its ends and
  // blocks). REQUIRES: setup.params holds the whole model on rank
  // setup.tp.rank.
  CachedDecoder(const ModelConfig& config, const DecoderSetup& setup);
  // `ends` names the embedding, positions (or none), final norm and head
  // (as a chunk holding the whole model has them); `blocks` every layer.
  CachedDecoder(const ModelConfig& config, const DecoderSetup& setup,
                ChunkEnds ends, std::vector<CachedBlock> blocks);

  std::vector<float> Forward(std::span<const int32_t> tokens) override;
  int64_t length() const override { return cache_.length(); }
  int64_t capacity() const override { return cache_.capacity(); }
  void Reset() override { cache_.Clear(); }
  size_t CacheBytes() const override { return cache_.bytes(); }
  void SetExpertBias(const ExpertBias& bias) override;

 private:
  // Final norm and head on `last` (1, C); the whole vocabulary's logits.
  std::vector<float> Logits(const Tensor& last);

  ModelConfig config_;
  TpPlace tp_;
  Communicator& tp_comm_;
  Device device_;
  DType dtype_;
  ChunkEnds ends_;
  VocabShard vocab_;
  std::vector<CachedBlock> blocks_;
  // Block l's router selection bias (E) with moe_bias_update_rate; else
  // undefined, as for a dense block.
  std::vector<Tensor> router_bias_;
  KvCache cache_;
  // One scratch per class of blocks (CachedBlock::SharesScratch); block l
  // uses scratches_[scratch_of_[l]].
  std::vector<DecodeScratch> scratches_;
  std::vector<size_t> scratch_of_;
  Tensor ids_;                // (capacity) int32
  Tensor x_;                  // (capacity, C)
  Tensor lnf_, mean_, rstd_;  // (1, C), (1), (1)
  Tensor logits_, gathered_;  // (1, Vl), (tp · Vl)
  Tensor logits_f32_;         // (tp · Vl) float32 on the device
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CACHED_DECODER_H_
