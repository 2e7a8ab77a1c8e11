#include "framework/kernels/qk_norm.h"

#include <cmath>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::CheckQkNormShapes;
using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

template <typename T>
void ForwardCpu(T* qkv, int64_t rows, int64_t heads, int64_t kv_heads,
                int64_t d, const T* wq, const T* wk, T eps, T* in, T* rstd) {
  const int64_t w = (heads + 2 * kv_heads) * d, normed = heads + kv_heads;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t h = 0; h < normed; ++h) {
      T* x = qkv + i * w + h * d;
      T* saved = in + (i * normed + h) * d;
      const T* weight = h < heads ? wq : wk;
      T square = 0;
      for (int64_t c = 0; c < d; ++c) square += x[c] * x[c];
      const T s = T{1} / std::sqrt(square / static_cast<T>(d) + eps);
      for (int64_t c = 0; c < d; ++c) {
        saved[c] = x[c];
        x[c] = x[c] * s * weight[c];
      }
      rstd[i * normed + h] = s;
    }
  }
}

template <typename T>
void BackwardCpu(T* dqkv, int64_t rows, int64_t heads, int64_t kv_heads,
                 int64_t d, const T* in, const T* rstd, const T* wq,
                 const T* wk, T* dw) {
  const int64_t w = (heads + 2 * kv_heads) * d, normed = heads + kv_heads;
  for (int64_t c = 0; c < 2 * d; ++c) dw[c] = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t h = 0; h < normed; ++h) {
      T* g = dqkv + i * w + h * d;
      const T* x = in + (i * normed + h) * d;
      const T s = rstd[i * normed + h];
      const bool query = h < heads;
      const T* weight = query ? wq : wk;
      T* dweight = query ? dw : dw + d;
      T dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += g[c] * weight[c] * x[c] * s;
      const T mean = dot / static_cast<T>(d);
      for (int64_t c = 0; c < d; ++c) {
        const T xhat = x[c] * s;
        dweight[c] += g[c] * xhat;
        g[c] = s * (g[c] * weight[c] - xhat * mean);
      }
    }
  }
}

}  // namespace

int64_t kernels_internal::CheckQkNormShapes(const char* kernel,
                                            const Tensor& qkv, int64_t heads,
                                            int64_t kv_heads, const Tensor& in,
                                            const Tensor& rstd,
                                            const Tensor& wq, const Tensor& wk,
                                            int64_t* rows) {
  TRELLIS_CHECK(heads > 0 && kv_heads > 0 && qkv.ndim() >= 1)
      << kernel << ": heads " << heads << ", kv_heads " << kv_heads;
  const int64_t w = qkv.dim(-1), groups = heads + 2 * kv_heads;
  TRELLIS_CHECK(w % groups == 0)
      << kernel << ": width " << w << " is not " << groups << " heads";
  const int64_t d = w / groups;
  *rows = w == 0 ? 0 : qkv.numel() / w;
  TRELLIS_CHECK(in.numel() == *rows * (heads + kv_heads) * d &&
                rstd.numel() == *rows * (heads + kv_heads))
      << kernel << ": qkv " << ShapeString(qkv.shape()) << ", in "
      << ShapeString(in.shape()) << ", rstd " << ShapeString(rstd.shape());
  TRELLIS_CHECK(wq.numel() == d && wk.numel() == d)
      << kernel << ": head width " << d << ", weights "
      << ShapeString(wq.shape()) << " and " << ShapeString(wk.shape());
  return d;
}

void QkNormForward(Tensor& qkv, int64_t heads, int64_t kv_heads,
                   const Tensor& wq, const Tensor& wk, double eps, Tensor& in,
                   Tensor& rstd) {
  const char* kernel = "QkNormForward";
  TRELLIS_CUDA_DISPATCH(
      cuda::QkNormForward(qkv, heads, kv_heads, wq, wk, eps, in, rstd), &qkv,
      &wq, &wk, &in, &rstd);
  RequireCpu(kernel, {&qkv, &wq, &wk, &in, &rstd});
  RequireDType(kernel, qkv.dtype(), {&wq, &wk, &in, &rstd});
  TRELLIS_CHECK(eps >= 0 && std::isfinite(eps)) << kernel << ": eps " << eps;
  int64_t rows = 0;
  const int64_t d =
      CheckQkNormShapes(kernel, qkv, heads, kv_heads, in, rstd, wq, wk, &rows);
  DispatchFloat(kernel, qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ForwardCpu(qkv.data<T>(), rows, heads, kv_heads, d, wq.data<T>(),
               wk.data<T>(), static_cast<T>(eps), in.data<T>(), rstd.data<T>());
  });
}

void QkNormBackward(Tensor& dqkv, int64_t heads, int64_t kv_heads,
                    const Tensor& in, const Tensor& rstd, const Tensor& wq,
                    const Tensor& wk, Tensor& dw) {
  const char* kernel = "QkNormBackward";
  TRELLIS_CUDA_DISPATCH(
      cuda::QkNormBackward(dqkv, heads, kv_heads, in, rstd, wq, wk, dw), &dqkv,
      &in, &rstd, &wq, &wk, &dw);
  RequireCpu(kernel, {&dqkv, &in, &rstd, &wq, &wk, &dw});
  RequireDType(kernel, dqkv.dtype(), {&in, &rstd, &wq, &wk, &dw});
  int64_t rows = 0;
  const int64_t d =
      CheckQkNormShapes(kernel, dqkv, heads, kv_heads, in, rstd, wq, wk, &rows);
  TRELLIS_CHECK(dw.numel() == 2 * d)
      << kernel << ": dw " << ShapeString(dw.shape()) << " for heads of " << d;
  DispatchFloat(kernel, dqkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BackwardCpu(dqkv.data<T>(), rows, heads, kv_heads, d, in.data<T>(),
                rstd.data<T>(), wq.data<T>(), wk.data<T>(), dw.data<T>());
  });
}

}  // namespace trellis
