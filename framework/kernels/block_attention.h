// Blockwise causal attention with log-sum-exp outputs: the pieces from
// which context parallelism assembles the attention of a window whose
// tokens are spread over ranks (parallel/context_parallel.h). A rank attends
// its own queries to one block of keys and values at a time; each block
// gives a partial output normalized over that block and the log-sum-exp of
// its scores, and the partials merge exactly into the attention over the
// union of the blocks.
//
// Shapes, H query heads and Hkv key/value heads of width D on this rank
// (query head h reads key/value head h / (H / Hkv), as attention.h):
//   q   (B, Tq, H·D)          the queries;
//   kv  (B, Tk, 2·Hkv·D)      per token [Hkv key heads | Hkv value heads];
//   out (B, Tq, H·D), lse (B, H, Tq) in q's dtype;
//   q_pos (Tq), k_pos (Tk) int32: the tokens' positions in the window, the
//     same for every row of the batch; k_pos non-decreasing;
//   doc_start (B, Tq) int32 or undefined: the window position at which
//     query token i's document starts (document masking).
// Query i attends key j iff doc_start[b, i] <= k_pos[j] <= q_pos[i] (the
// lower bound 0 without document masking), with scale 1/sqrt(D). A query
// with no key to attend in the block gets out = 0 and lse = -inf, which
// the merge treats as an empty block.
//
// Backward follows flash attention: given the merged (final) out and lse,
// each block's probabilities are recomputed as exp(scale·q·k - lse) and the
// block adds its share to dq and dkv. Summed over the blocks this is the
// gradient of the whole attention. Both gradients ACCUMULATE (+=).
//
// CPU only (float32, float64). REQUIRES: n_head % n_kv_head == 0.
#ifndef TRELLIS_FRAMEWORK_KERNELS_BLOCK_ATTENTION_H_
#define TRELLIS_FRAMEWORK_KERNELS_BLOCK_ATTENTION_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

// Which queries see which keys: positions and, optionally, documents.
struct BlockMask {
  const Tensor* q_pos = nullptr;      // (Tq) int32
  const Tensor* k_pos = nullptr;      // (Tk) int32, non-decreasing
  const Tensor* doc_start = nullptr;  // (B, Tq) int32, or null
};

// out, lse = the attention of q over the keys and values of kv.
void BlockAttentionForward(const Tensor& q, const Tensor& kv,
                           const BlockMask& mask, int64_t n_head,
                           int64_t n_kv_head, Tensor& out, Tensor& lse);

// (out, lse) becomes the attention over the union of its keys and those of
// the block that gave (block_out, block_lse): each row is the two rows
// weighted by exp(lse - merged lse). Rows whose block lse is -inf are kept.
void AttentionMergeBlock(Tensor& out, Tensor& lse, const Tensor& block_out,
                         const Tensor& block_lse);

// dq += dL/dq and dkv += dL/dkv of this block's share, given dout and the
// merged out and lse of the whole attention.
void BlockAttentionBackward(const Tensor& dout, const Tensor& q,
                            const Tensor& kv, const BlockMask& mask,
                            const Tensor& out, const Tensor& lse,
                            int64_t n_head, int64_t n_kv_head, Tensor& dq,
                            Tensor& dkv);

// q (B, T, H·D) and kv (B, T, 2·Hkv·D) = the two bands of qkv (B, T,
// (H + 2·Hkv)·D) as attention.h lays it out (queries, then keys and
// values), copied out.
void SplitQkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, Tensor& q,
              Tensor& kv);
// dqkv = [dq | dkv], written (the inverse of SplitQkv).
void JoinQkv(const Tensor& dq, const Tensor& dkv, int64_t n_head,
             int64_t n_kv_head, Tensor& dqkv);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_BLOCK_ATTENTION_H_
