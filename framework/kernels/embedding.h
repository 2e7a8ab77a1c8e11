// Token and position embeddings.
//
// The token table may be one vocabulary-parallel shard: it holds rows
// [vocab_start, vocab_start + table.dim(0)) of the logical table. Ids outside
// that range produce zero rows here (another shard supplies them, and the
// tensor-parallel all-reduce sums the shards).
#ifndef TRELLIS_FRAMEWORK_KERNELS_EMBEDDING_H_
#define TRELLIS_FRAMEWORK_KERNELS_EMBEDDING_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

// out (N, C) = table[ids - vocab_start] or 0. ids (N) int32, table (Vl, C).
void EmbeddingForward(const Tensor& ids, const Tensor& table,
                      int64_t vocab_start, Tensor& out);
// dtable[ids - vocab_start] += dout for ids inside the shard.
void EmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                             int64_t vocab_start, Tensor& dtable);

// x (B, T, C) += wpe[t] for t < T. wpe (T_max, C), T <= T_max.
void AddPositionEmbedding(const Tensor& wpe, Tensor& x);
// dwpe[t] += sum over b of dout[b, t]. dout (B, T, C).
void PositionEmbeddingBackwardWeight(const Tensor& dout, Tensor& dwpe);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_EMBEDDING_H_
