// Small elementwise kernels: residual adds, bias, scaling, reductions.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ELEMENTWISE_H_
#define TRELLIS_FRAMEWORK_KERNELS_ELEMENTWISE_H_

#include <vector>

#include "framework/tensor.h"

namespace trellis {

// out = a + b (same shapes; out may alias a or b).
void Add(const Tensor& a, const Tensor& b, Tensor& out);
// y += alpha · x.
void Axpy(double alpha, const Tensor& x, Tensor& y);
// x *= s.
void Scale(Tensor& x, double s);
// x (N, M) row i *= w[i]; w (N) float32 (per-row weights, such as loss
// weights). x may be 1-D (N), each element a row.
void ScaleRows(const Tensor& w, Tensor& x);
// out (N, M) += bias (M).
void AddBias(const Tensor& bias, Tensor& out);
// dbias (M) += column sums of dout (N, M).
void BiasBackward(const Tensor& dout, Tensor& dbias);
// One job of ColumnSumsMany. A bias gradient: db (M) += column sums of
// dout (N, M), x, mean, rstd and dw null. A LayerNorm's weight and bias
// gradients: also x (N, M), mean (N), rstd (N) and dw (M), with
// dw += column sums of dout · (x - mean) · rstd.
struct ColumnSumJob {
  const Tensor* dout = nullptr;
  const Tensor* x = nullptr;
  const Tensor* mean = nullptr;
  const Tensor* rstd = nullptr;
  Tensor* dw = nullptr;
  Tensor* db = nullptr;
};
// Every job, as BiasBackward or LayerNormBackwardWeight would do it (on the
// CPU, exactly those calls). On CUDA one launch for up to kColumnSumJobs
// jobs of one row count N (a block's four bias gradients and two
// LayerNorms' fit; jobs of other row counts, such as a LayerNorm's share of
// the rows under sequence parallelism, take a launch of their own), summed
// in a fixed order: each block of columns and rows writes a partial, and
// the last block of a column strip to finish (counted on a per-device
// counter) adds the strip's partials in order.
inline constexpr int kColumnSumJobs = 8;
void ColumnSumsMany(const std::vector<ColumnSumJob>& jobs);
// Sum of squares of all elements, accumulated in double.
double SumOfSquares(const Tensor& x);
// The sum over `xs` (one device) of SumOfSquares, added in order. On CUDA
// the host waits once for all of them, not once per tensor (a global
// gradient norm over hundreds of parameters).
double SumOfSquares(const std::vector<const Tensor*>& xs);
// Sum of all elements, accumulated in double.
double Sum(const Tensor& x);
// dst = src converted between floating dtypes (float32, float64, bfloat16,
// float16 on CPU; float32 and bfloat16 on CUDA), rounding to nearest even;
// the same element count, one device.
void Convert(const Tensor& src, Tensor& dst);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ELEMENTWISE_H_
