#include "framework/kernels/adamw.h"

#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"
#include "framework/kernels/elementwise.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// One AdamW update of n parameters; the scalars are folded once, in double,
// and the loop runs in T so that it vectorizes.
template <typename T>
void AdamWCpu(const AdamWHyper& h, const T* __restrict grad, int64_t n,
              T* __restrict param, T* __restrict m, T* __restrict v) {
  const T beta1 = static_cast<T>(h.beta1);
  const T beta2 = static_cast<T>(h.beta2);
  const T one_minus_beta1 = static_cast<T>(1.0 - h.beta1);
  const T one_minus_beta2 = static_cast<T>(1.0 - h.beta2);
  const T inv_bc1 = static_cast<T>(
      1.0 / (1.0 - std::pow(h.beta1, static_cast<double>(h.step))));
  const T inv_bc2 = static_cast<T>(
      1.0 / (1.0 - std::pow(h.beta2, static_cast<double>(h.step))));
  const T lr = static_cast<T>(h.lr);
  const T eps = static_cast<T>(h.eps);
  const T weight_decay = static_cast<T>(h.weight_decay);
  const T grad_scale = static_cast<T>(h.grad_scale);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * grad_scale;
    const T mi = beta1 * m[i] + one_minus_beta1 * g;
    const T vi = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const T update = (mi * inv_bc1) / (std::sqrt(vi * inv_bc2) + eps);
    param[i] -= lr * (update + weight_decay * param[i]);
  }
}

}  // namespace

void AdamWStep(const AdamWHyper& hyper, const Tensor& grad, Tensor& param,
               Tensor& m, Tensor& v) {
  const char* kernel = "AdamWStep";
  TRELLIS_CUDA_DISPATCH(cuda::AdamWStep(hyper, grad, param, m, v), &grad,
                        &param, &m, &v);
  RequireCpu(kernel, {&grad, &param, &m, &v});
  RequireDType(kernel, param.dtype(), {&grad, &m, &v});
  TRELLIS_CHECK(grad.shape() == param.shape() && m.shape() == param.shape() &&
                v.shape() == param.shape())
      << kernel << ": param " << ShapeString(param.shape()) << ", grad "
      << ShapeString(grad.shape()) << ", m " << ShapeString(m.shape()) << ", v "
      << ShapeString(v.shape());
  TRELLIS_CHECK_GE(hyper.step, 1) << kernel << " steps count from 1";
  DispatchFloat(kernel, param.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AdamWCpu(hyper, grad.data<T>(), param.numel(), param.data<T>(), m.data<T>(),
             v.data<T>());
  });
}

void AdamWStepMany(const AdamWHyper& hyper,
                   const std::vector<AdamWTensors>& params) {
  if (params.empty()) return;
  const AdamWTensors& first = params.front();
  TRELLIS_CUDA_DISPATCH(cuda::AdamWStepMany(hyper, params), first.grad,
                        first.param, first.m, first.v);
  const int64_t count = static_cast<int64_t>(params.size());
  trellis_cpu_launches.set_launches(static_cast<int>(
      (count + kAdamWTensorsPerLaunch - 1) / kAdamWTensorsPerLaunch));
  for (const AdamWTensors& p : params) {
    TRELLIS_CHECK(p.grad && p.param && p.m && p.v)
        << "AdamWStepMany: an entry lacks a tensor";
    AdamWHyper h = hyper;
    h.weight_decay = p.weight_decay;
    AdamWStep(h, *p.grad, *p.param, *p.m, *p.v);
    if (p.refresh != nullptr) Convert(*p.param, *p.refresh);
  }
}

}  // namespace trellis
