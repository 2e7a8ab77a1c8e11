// CachedBlock: the block skeleton of generation, forward only, over a
// key/value cache: the same math as DecoderBlock's forward
// (decoder_block.h), from the same family hooks (block_parts.h), with the
// attention of the new tokens over everything cached:
//
//   norm1 → qkv_proj → positions at the tokens' places → attention over
//   the cache → out_proj (all-reduced) → residual → norm2 → the MLP's up
//   half → down (all-reduced) → residual.
//
// Thread safety: none; one thread drives a decoder's blocks.
#ifndef TRELLIS_TRANSFORMER_CACHED_BLOCK_H_
#define TRELLIS_TRANSFORMER_CACHED_BLOCK_H_

#include <cstdint>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "transformer/block_parts.h"
#include "transformer/config.h"

namespace trellis {

// The buffers of one block's cached forward on up to `rows` new tokens,
// shared by the blocks of a decoder: ln1/mean1/rstd1 the norms' output and
// statistics (both norms reuse them), qkv, att, x2, fc and gelu (the MLP's
// activation) as in training, the position tables (capacity rows).
struct DecodeScratch {
  BlockTensors t;
  Tensor y;  // (rows, C)
};

class CachedBlock {
 public:
  CachedBlock(const ModelConfig& config, BlockParts parts);

  // The width of this rank's cached key (and value) rows: Hkv/tp · D.
  int64_t kv_width() const;
  // Buffers for up to `rows` new tokens and a cache of `capacity`.
  DecodeScratch NewScratch(int64_t rows, int64_t capacity, DType dtype,
                           Device device) const;
  // Whether `other`'s scratch holds the same MLP tensors as this block's
  // (blocks of one class, e.g. dense or mixture-of-experts MLPs: one
  // scratch serves both).
  bool SharesScratch(const CachedBlock& other) const;
  // Experts its MLP routes over (0: a dense MLP).
  int64_t RoutedExperts() const;
  // The selection bias (E) its router adds when choosing experts (null:
  // none). REQUIRES: outlives the block.
  void set_router_bias(const Tensor* bias) { router_bias_ = bias; }
  // x (n, C): the hidden rows of the tokens at positions [start, start + n),
  // replaced by the block's output. Writes their keys and values into rows
  // [start, start + n) of `keys` and `values` (capacity, kv_width).
  void Forward(Communicator& tp, int64_t start, Tensor& x, Tensor& keys,
               Tensor& values, DecodeScratch& scratch) const;

 private:
  int64_t d_model_;
  BlockParts parts_;
  ColumnParallelLinear qkv_proj_;
  RowParallelLinear out_proj_;
  const Tensor* router_bias_ = nullptr;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_CACHED_BLOCK_H_
