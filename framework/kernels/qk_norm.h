// Per-head RMSNorm of the queries and keys in a fused qkv projection
// (Qwen3's q_norm and k_norm, OLMo 2's): each query head's D channels are
// normalized and scaled by wq (D), each key head's by wk (D); value heads
// pass untouched. Applied after qkv_proj and before RoPE.
//
// Shapes: qkv and dqkv (N, W) (any rank, W the last dimension) with each
// row laid out as [heads query heads | kv_heads key heads | kv_heads value
// heads], D = W / (heads + 2 · kv_heads); in (N, (heads + kv_heads) · D),
// the query and key channels before the norm; rstd (N, heads + kv_heads);
// dw (2, D): row 0 wq's gradient, row 1 wk's. All of one floating dtype
// (the CPU kernels: float32 or float64).
//
// QkNormForward and QkNormBackward overwrite their outputs (qkv and dqkv
// in place). Thread safety: as every kernel, calls on distinct outputs may
// run concurrently.
#ifndef TRELLIS_FRAMEWORK_KERNELS_QK_NORM_H_
#define TRELLIS_FRAMEWORK_KERNELS_QK_NORM_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

// qkv's query and key heads ← x · rstd · w, x their values before; saves
// x into `in` and rstd = 1 / sqrt(mean(x²) + eps) per head.
void QkNormForward(Tensor& qkv, int64_t heads, int64_t kv_heads,
                   const Tensor& wq, const Tensor& wk, double eps, Tensor& in,
                   Tensor& rstd);
// dqkv's query and key heads (the gradient at the norm's output) ← the
// gradient at its input, rstd · (g - x̂ · mean(g · x̂)) with g = dout · w
// and x̂ = x · rstd; dw ← Σ dout · x̂ over rows and heads.
void QkNormBackward(Tensor& dqkv, int64_t heads, int64_t kv_heads,
                    const Tensor& in, const Tensor& rstd, const Tensor& wq,
                    const Tensor& wk, Tensor& dw);

namespace kernels_internal {
// The shape checks both backends run: returns the head width D and sets
// *rows (qkv's rows).
int64_t CheckQkNormShapes(const char* kernel, const Tensor& qkv, int64_t heads,
                          int64_t kv_heads, const Tensor& in,
                          const Tensor& rstd, const Tensor& wq,
                          const Tensor& wk, int64_t* rows);
}  // namespace kernels_internal

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_QK_NORM_H_
