// RoPE as a block's position hook (BlockPositions, block_parts.h): rotates
// each query and key head of qkv by its token's position (the rotate-half
// pairing of framework/kernels/rope.h), after qkv_proj and before
// attention; the backward rotates the gradients back. The cos and sin
// tables (positions, D/2) live in the block's workspace (or the decode
// scratch, over the whole context): the activations' dtype on the CPU,
// float32 on CUDA.
//
// Thread safety: immutable after construction.
#ifndef TRELLIS_TRANSFORMER_LLAMA_ROPE_POSITIONS_H_
#define TRELLIS_TRANSFORMER_LLAMA_ROPE_POSITIONS_H_

#include <cstdint>
#include <memory>

#include "framework/kernels/rope.h"
#include "transformer/block_parts.h"

namespace trellis {

// `heads` query and `kv_heads` key/value heads of `head_dim` on this rank.
// REQUIRES: the options valid (RopeInverseFrequencies accepts them).
std::shared_ptr<const BlockPositions> NewRopePositions(int64_t heads,
                                                       int64_t kv_heads,
                                                       int64_t head_dim,
                                                       double theta,
                                                       RopeScaling scaling);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_ROPE_POSITIONS_H_
