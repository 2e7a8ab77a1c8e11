// RMSNorm over the last dimension (Llama's norm): y = x · rstd · w with
// rstd = 1 / sqrt(mean(x²) + eps); no mean is subtracted and there is no
// bias. eps is the model's (Llama 2: 1e-6, Llama 3: 1e-5).
//
// Shapes: x, out, dout, dx, residual, a, b, sum (N, C) (any rank, C the last
// dimension), w and dw (C), rstd (N). rstd is saved by the forward for both
// backward passes; it is float32 for float32 and bfloat16 inputs and float64
// for float64 inputs.
//
// Forward functions overwrite their outputs; RmsNormBackwardInput and
// RmsNormBackwardWeight accumulate, RmsNormBackwardInputResidual overwrites
// (see each). Thread safety: as every kernel, calls on distinct outputs may
// run concurrently.
#ifndef TRELLIS_FRAMEWORK_KERNELS_RMSNORM_H_
#define TRELLIS_FRAMEWORK_KERNELS_RMSNORM_H_

#include "framework/tensor.h"

namespace trellis {

// out = x · rstd · w; saves rstd.
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, Tensor& out,
                    Tensor& rstd);
// The residual add and the RMSNorm after it, row by row: sum = a + b, then
// RmsNormForward of the sum as stored (on CUDA in bfloat16, the rounded sum),
// so that the results equal Add then RmsNormForward bit for bit. sum may
// alias a or b; out must not alias sum.
void AddRmsNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                       double eps, Tensor& sum, Tensor& out, Tensor& rstd);
// dx += dL/dx = rstd · (g - xhat · mean(g · xhat)), g = dout · w,
// xhat = x · rstd.
void RmsNormBackwardInput(const Tensor& dout, const Tensor& x, const Tensor& w,
                          const Tensor& rstd, Tensor& dx);
// dx = residual + dL/dx, OVERWRITING dx (the same numbers as
// dx.CopyFrom(residual) then RmsNormBackwardInput, in one pass). residual
// may alias dx; dx may alias neither dout nor x.
void RmsNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd,
                                  const Tensor& residual, Tensor& dx);
// dw += sum over rows of dout · x · rstd.
void RmsNormBackwardWeight(const Tensor& dout, const Tensor& x,
                           const Tensor& rstd, Tensor& dw);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_RMSNORM_H_
