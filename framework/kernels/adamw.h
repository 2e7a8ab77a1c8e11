// AdamW with decoupled weight decay (Loshchilov & Hutter):
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
//   p -= lr · (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay · p)
// `step` counts from 1. param, grad, m, v: same shape; m and v float32.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_
#define TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

struct AdamWHyper {
  double lr = 6e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // The caller passes 0 for non-2-D tensors.
  int64_t step = 1;
  // Gradients are multiplied by this first (clipping folds in here).
  double grad_scale = 1.0;
};

void AdamWStep(const AdamWHyper& hyper, const Tensor& grad, Tensor& param,
               Tensor& m, Tensor& v);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_
