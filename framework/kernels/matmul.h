// Dense layers: out = x @ W (+ bias), with W stored (in, out) as in Hugging
// Face's GPT-2 Conv1D, or (out, in) when `transposed` (the tied LM head reads
// the (V, C) embedding that way). CPU: OpenBLAS sgemm/dgemm.
#ifndef TRELLIS_FRAMEWORK_KERNELS_MATMUL_H_
#define TRELLIS_FRAMEWORK_KERNELS_MATMUL_H_

#include "framework/kernels/grad_write.h"
#include "framework/tensor.h"

namespace trellis {

enum class WeightLayout { kInOut, kOutIn };

// x (N, K), w (K, M) or (M, K), bias (M) or undefined -> out (N, M).
void MatmulForward(const Tensor& x, const Tensor& w, const Tensor& bias,
                   Tensor& out, WeightLayout layout = WeightLayout::kInOut);
// out (N, M) = residual (N, M) + (x @ w + bias): a layer whose output joins
// the residual stream, written once. residual and out are distinct. CPU:
// MatmulForward then Add, bit for bit the pair. CUDA: the residual is the
// GEMM's C matrix (beta 1), so the sum is rounded once, with the bias in the
// epilogue.
void MatmulForwardResidual(const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, Tensor& out,
                           WeightLayout layout = WeightLayout::kInOut);
// pre_gelu (N, M) = x @ w + bias (kept for GeluBackward), out (N, M) =
// GeluForward(pre_gelu); pre_gelu and out are distinct. CPU: MatmulForward
// then GeluForward. CUDA: GELU in the GEMM's epilogue (cuBLASLt's tanh
// approximation; the unfused pair where the epilogue does not apply).
void MatmulForwardGelu(const Tensor& x, const Tensor& w, const Tensor& bias,
                       Tensor& pre_gelu, Tensor& out,
                       WeightLayout layout = WeightLayout::kInOut);
// dx (N, K) += dout (N, M) @ w^T, or = with GradWrite::kWrite (then dx's
// previous content, even NaN, is ignored).
void MatmulBackwardInput(const Tensor& dout, const Tensor& w, Tensor& dx,
                         WeightLayout layout = WeightLayout::kInOut,
                         GradWrite write = GradWrite::kAccumulate);
// The input gradient of a layer whose output went through GELU:
// dpre (N, K) = (dout (N, M) @ w^T) · gelu'(pre_gelu), pre_gelu (N, K) being
// what MatmulForwardGelu kept. OVERWRITES dpre (pre_gelu and dpre distinct).
// Equals MatmulBackwardInput into a zeroed buffer then GeluBackward into a
// zeroed dpre. CPU: the GEMM with beta 0, then the GELU derivative in place.
// CUDA: cuBLASLt's DGELU epilogue (the unfused pair where it does not
// apply).
void MatmulBackwardInputGelu(const Tensor& dout, const Tensor& w,
                             const Tensor& pre_gelu, Tensor& dpre,
                             WeightLayout layout = WeightLayout::kInOut);
// dw += x^T @ dout (or its transpose for kOutIn); dbias (may be undefined)
// += column sums of dout. CUDA: the bias gradient comes from the GEMM's
// epilogue (cuBLASLt BGRADA/BGRADB) into float32 scratch, then one add.
void MatmulBackwardWeight(const Tensor& dout, const Tensor& x, Tensor& dw,
                          Tensor& dbias,
                          WeightLayout layout = WeightLayout::kInOut);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_MATMUL_H_
