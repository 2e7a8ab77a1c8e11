// GELU, tanh approximation (GPT-2's):
// 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
#ifndef TRELLIS_FRAMEWORK_KERNELS_GELU_H_
#define TRELLIS_FRAMEWORK_KERNELS_GELU_H_

#include "framework/tensor.h"

namespace trellis {

void GeluForward(const Tensor& x, Tensor& out);
// dx += gelu'(x) · dout.
void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx);
// dx = gelu'(x) · dout, overwriting dx, which may alias dout (not x).
void GeluBackwardWrite(const Tensor& x, const Tensor& dout, Tensor& dx);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_GELU_H_
