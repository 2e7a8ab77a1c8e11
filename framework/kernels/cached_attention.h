// Causal attention of new tokens over a key/value cache: the attention of
// incremental decoding (text generation), where each step appends the keys
// and values of its tokens to a cache and attends over everything cached.
//
// One sequence. qkv (n, (H + 2·Hkv)·D) holds the n new tokens at positions
// [start, start + n), packed as the grouped-query AttentionForward reads
// them ([H q heads | Hkv k heads | Hkv v heads], D channels each; RoPE, if
// any, already applied). CachedAttentionForward
//   1. copies each new token's k and v heads into rows [start, start + n)
//      of k_cache and v_cache (Tcap, Hkv·D), and
//   2. writes out (n, H·D): query i (position start + i) attends, with
//      scale 1/sqrt(D), to the cached keys 0 .. start + i of its key/value
//      head h / (H / Hkv), as causal AttentionForward over the whole
//      sequence would.
// So prefilling a prompt (start 0, n its length) and then decoding one
// token at a time (n 1) give the rows a full forward gives, to float
// rounding. Arithmetic: the tensors' dtype on the CPU (float32 or float64),
// float32 on CUDA (float32 or bfloat16 tensors; there start + n is at most
// 11712 and D at most 512: cached_attention_launch.h).
//
// REQUIRES: start + n <= Tcap; n_head % n_kv_head == 0; every tensor of one
// dtype and device; out does not alias qkv or the caches.
#ifndef TRELLIS_FRAMEWORK_KERNELS_CACHED_ATTENTION_H_
#define TRELLIS_FRAMEWORK_KERNELS_CACHED_ATTENTION_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

void CachedAttentionForward(const Tensor& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t start, Tensor& k_cache,
                            Tensor& v_cache, Tensor& out);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_CACHED_ATTENTION_H_
