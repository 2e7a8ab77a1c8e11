// AdamW with decoupled weight decay (Loshchilov & Hutter):
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²
//   p -= lr · (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + weight_decay · p)
// `step` counts from 1. param, grad, m, v: same shape; m and v float32.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_
#define TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_

#include <cstdint>
#include <vector>

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

// One parameter of a multi-tensor step: param (the weights stepped: the
// float32 master of a bfloat16 value) with its grad and moments, its own
// weight decay (AdamWHyper::weight_decay is ignored by AdamWStepMany), and
// optionally `refresh`, a lower-precision copy of param (same element
// count) set to the stepped weights rounded to nearest even; null for none.
struct AdamWTensors {
  const Tensor* grad = nullptr;
  Tensor* param = nullptr;
  Tensor* m = nullptr;
  Tensor* v = nullptr;
  double weight_decay = 0.0;
  Tensor* refresh = nullptr;
};

// AdamWStep over every entry, then each `refresh` (as Convert would); the
// same numbers as a loop of AdamWStep and Convert calls. On CUDA, when all
// entries are float32 params and grads on one device (refresh copies
// bfloat16 or float32), one launch steps up to kAdamWTensorsPerLaunch
// parameters and writes their refreshed copies; otherwise it loops.
inline constexpr int kAdamWTensorsPerLaunch = 256;
void AdamWStepMany(const AdamWHyper& hyper,
                   const std::vector<AdamWTensors>& params);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ADAMW_H_
