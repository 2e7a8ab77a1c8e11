// Causal multi-head self-attention, scale 1/sqrt(D).
//
// qkv (B, T, 3·H·D) holds, per token, [Q | K | V], each H heads of D channels
// (head h at columns h·D of its third), as c_attn of GPT-2 produces it; H is
// the number of heads on this rank. out (B, T, H·D), heads side by side.
// `saved` is what backward needs, its shape from AttentionSavedShape: on CPU
// the softmax probabilities (B, H, T, T); on CUDA the row log-sum-exps
// (B, H, T), so that no T×T matrix is stored.
//
// `path` picks the CUDA implementation (attention_path.h: cuDNN where a plan
// builds, else the tensor-core kernels, by default); CPU calls ignore it.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_
#define TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_

#include <cstdint>

#include "framework/kernels/attention_path.h"
#include "framework/tensor.h"

namespace trellis {

Shape AttentionSavedShape(Device device, int64_t B, int64_t T, int64_t n_head);

void AttentionForward(const Tensor& qkv, int64_t n_head, Tensor& out,
                      Tensor& saved,
                      AttentionPath path = kDefaultAttentionPath);
// dqkv += dL/dqkv. `out` is the forward output (CUDA backward needs it).
void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, Tensor& dqkv,
                       AttentionPath path = kDefaultAttentionPath);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ATTENTION_H_
