// Device-side accumulation of whole-tensor sums: a running total that stays
// on the tensors' device, so a training step can add up its microbatch
// losses without the host waiting for each one, and read the total once.
//
// REQUIRES (every call): `total` is a float64 tensor of one element on the
// device of `x`; `x` is float32, float64 (CPU) or bfloat16 (CUDA). The sum
// is accumulated in float64 in an order fixed by the size, so repeating a
// call repeats its result to the bit. Neither backend waits for the device.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ACCUMULATE_H_
#define TRELLIS_FRAMEWORK_KERNELS_ACCUMULATE_H_

#include "framework/tensor.h"

namespace trellis {

// total[0] += (sum of x's elements) / divisor. On the CPU the sum is the
// one Sum() returns (framework/kernels/elementwise.h), so
// AccumulateSum(x, n, t) adds exactly Sum(x) / n.
void AccumulateSum(const Tensor& x, double divisor, Tensor& total);

namespace cuda {
// The CUDA twin (framework/cuda/accumulate.cc).
void AccumulateSum(const Tensor& x, double divisor, Tensor& total);
}  // namespace cuda

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ACCUMULATE_H_
