// LayerNorm over the last dimension: y = (x - mean) * rstd * w + b.
#ifndef TRELLIS_FRAMEWORK_KERNELS_LAYERNORM_H_
#define TRELLIS_FRAMEWORK_KERNELS_LAYERNORM_H_

#include "framework/tensor.h"

namespace trellis {

inline constexpr double kLayerNormEps = 1e-5;

// x (N, C), w (C), b (C) -> out (N, C); saves mean (N) and rstd (N), which
// are always float32 for float32 inputs and float64 for float64 inputs.
void LayerNormForward(const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& out, Tensor& mean, Tensor& rstd);
// The residual add and the LayerNorm after it, row by row: sum = a + b, then
// LayerNormForward(sum, w, bias, out, mean, rstd) on the sum as stored (on
// CUDA in bfloat16, the rounded sum), so that the results equal Add then
// LayerNormForward bit for bit. a, b, sum, out (N, C); sum may alias a or b,
// out must not alias sum.
void AddLayerNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                         const Tensor& bias, Tensor& sum, Tensor& out,
                         Tensor& mean, Tensor& rstd);
// dx += dL/dx.
void LayerNormBackwardInput(const Tensor& dout, const Tensor& x,
                            const Tensor& w, const Tensor& mean,
                            const Tensor& rstd, Tensor& dx);
// dx = residual + dL/dx, OVERWRITING dx: the gradient flowing past the
// LayerNorm on the residual path plus the one through it, in one pass
// instead of a copy and an accumulate (the same numbers as
// dx.CopyFrom(residual) then LayerNormBackwardInput). residual (N, C) may
// alias dx; neither may alias dout or x.
void LayerNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                    const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& residual,
                                    Tensor& dx);
// dw += sum(dout * xhat), db += sum(dout), over rows.
void LayerNormBackwardWeight(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, Tensor& dw,
                             Tensor& db);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_LAYERNORM_H_
