// Causal multi-head self-attention, scale 1/sqrt(D), with grouped-query
// attention (GQA): Hkv key/value heads, each shared by H / Hkv query heads.
//
// qkv (B, T, (H + 2·Hkv)·D) holds, per token, [H q heads | Hkv k heads |
// Hkv v heads] of D channels each; query head h reads key/value head
// h / (H / Hkv). H and Hkv are the heads on this rank. With Hkv = H (the
// overloads without n_kv_head) this is [Q | K | V], each H heads, as c_attn
// of GPT-2 produces it, and the results are those of the multi-head kernels
// bit for bit. out (B, T, H·D), heads side by side.
// REQUIRES: n_kv_head > 0 and n_head % n_kv_head == 0.
// `saved` is what backward needs, its shape from AttentionSavedShape: on CPU
// the softmax probabilities (B, H, T, T); on CUDA the row log-sum-exps
// (B, H, T), so that no T×T matrix is stored.
//
// Document masking: `doc_start` (B, T) int32, where doc_start[b, t] is the
// position in the window at which token t's document starts
// (0 <= doc_start[b, t] <= t, non-decreasing along t), makes query t attend
// keys [doc_start[b, t], t] only: block-causal over the window's documents.
// An undefined doc_start is plain causal attention, bit for bit the
// overloads without it. CPU only for now: a CUDA call with a defined
// doc_start fails its check (the trainer refuses --document_mask on cuda).
//
// `path` picks the CUDA implementation (attention_path.h: cuDNN where a plan
// builds, else the tensor-core kernels, by default); CPU calls ignore it.
//
// Backward adds into dqkv (GradWrite::kAccumulate) or overwrites it
// (kWrite: dqkv's previous content, even NaN, is ignored; cuDNN then writes
// its result in place, with no scratch buffer and no add).
#ifndef TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_
#define TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_

#include <cstdint>

#include "framework/kernels/attention_path.h"
#include "framework/kernels/grad_write.h"
#include "framework/tensor.h"

namespace trellis {

Shape AttentionSavedShape(Device device, int64_t B, int64_t T, int64_t n_head);

// saved: AttentionSavedShape(device, B, T, n_head), per query head.
void AttentionForward(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                      Tensor& out, Tensor& saved,
                      AttentionPath path = kDefaultAttentionPath);
// dqkv += dL/dqkv. `out` is the forward output (CUDA backward needs it). A
// key/value head's dK and dV are summed over the query heads of its group.
void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv,
                       AttentionPath path = kDefaultAttentionPath);

// With document masking (see above); doc_start may be undefined. Backward
// takes the forward's doc_start, and `write` says whether dqkv is added to.
void AttentionForward(const Tensor& qkv, const Tensor& doc_start,
                      int64_t n_head, int64_t n_kv_head, Tensor& out,
                      Tensor& saved,
                      AttentionPath path = kDefaultAttentionPath);
void AttentionBackward(const Tensor& dout, const Tensor& qkv,
                       const Tensor& doc_start, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv, AttentionPath path = kDefaultAttentionPath,
                       GradWrite write = GradWrite::kAccumulate);

// Multi-head attention: n_kv_head = n_head.
void AttentionForward(const Tensor& qkv, int64_t n_head, Tensor& out,
                      Tensor& saved,
                      AttentionPath path = kDefaultAttentionPath);
void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, Tensor& dqkv,
                       AttentionPath path = kDefaultAttentionPath);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_
