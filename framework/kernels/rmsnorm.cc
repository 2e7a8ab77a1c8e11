#include "framework/kernels/rmsnorm.h"

#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::DotLanes;
using kernels_internal::kLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// One row: x (C), w (C) -> out (C), *rstd. The plain and the fused (residual
// add first) forward both call it, so they agree bit for bit.
template <typename T>
void RmsNormRow(const T* x, const T* w, int64_t C, T eps, T* out, T* rstd) {
  const T mean_square = DotLanes<T>(x, x, C) / static_cast<T>(C);
  const T s = T{1} / std::sqrt(mean_square + eps);
  for (int64_t c = 0; c < C; ++c) out[c] = x[c] * s * w[c];
  *rstd = s;
}

template <typename T>
void RmsNormForwardCpu(const T* x, const T* w, int64_t N, int64_t C, T eps,
                       T* out, T* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    RmsNormRow(x + i * C, w, C, eps, out + i * C, rstd + i);
  }
}

// sum (N, C) = a + b, then the RMSNorm of each sum row while it is in cache.
// sum may alias a or b: each element is read before it is written.
template <typename T>
void AddRmsNormForwardCpu(const T* a, const T* b, const T* w, int64_t N,
                          int64_t C, T eps, T* sum, T* out, T* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    const T* ai = a + i * C;
    const T* bi = b + i * C;
    T* si = sum + i * C;
    for (int64_t c = 0; c < C; ++c) si[c] = ai[c] + bi[c];
    RmsNormRow(si, w, C, eps, out + i * C, rstd + i);
  }
}

// dx (N, C) = base + rstd · (g - xhat · mean(g · xhat)), g = dout · w,
// xhat = x · rstd; base is dx itself to accumulate, or a residual gradient
// (which may alias dx).
template <typename T>
void RmsNormBackwardInputCpu(const T* dout, const T* x, const T* w,
                             const T* rstd, int64_t N, int64_t C, const T* base,
                             T* dx) {
  for (int64_t i = 0; i < N; ++i) {
    const T* di = dout + i * C;
    const T* xi = x + i * C;
    const T* bi = base + i * C;
    T* dxi = dx + i * C;
    const T s = rstd[i];
    T lane[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        lane[j] += di[c + j] * w[c + j] * xi[c + j] * s;
      }
    }
    T gx_mean = 0;
    for (; c < C; ++c) gx_mean += di[c] * w[c] * xi[c] * s;
    for (int j = 0; j < kLanes; ++j) gx_mean += lane[j];
    gx_mean /= static_cast<T>(C);
    for (int64_t k = 0; k < C; ++k) {
      dxi[k] = bi[k] + s * (di[k] * w[k] - xi[k] * s * gx_mean);
    }
  }
}

// dw (C) += sum over rows of dout · x · rstd.
template <typename T>
void RmsNormBackwardWeightCpu(const T* dout, const T* x, const T* rstd,
                              int64_t N, int64_t C, T* __restrict dw) {
  for (int64_t i = 0; i < N; ++i) {
    const T* di = dout + i * C;
    const T* xi = x + i * C;
    const T s = rstd[i];
    for (int64_t c = 0; c < C; ++c) dw[c] += di[c] * xi[c] * s;
  }
}

// Checks x (N, C) against `other` (same shape), the (C) weight and rstd (N),
// and returns C.
int64_t CheckShapes(const char* kernel, const Tensor& x, const Tensor& other,
                    const Tensor& w, const Tensor& rstd) {
  TRELLIS_CHECK(x.ndim() >= 1 && x.shape() == other.shape())
      << kernel << ": " << ShapeString(x.shape()) << " vs "
      << ShapeString(other.shape());
  const int64_t C = x.dim(-1);
  const int64_t N = C == 0 ? 0 : x.numel() / C;
  TRELLIS_CHECK(w.ndim() == 1 && w.dim(0) == C)
      << kernel << ": x " << ShapeString(x.shape()) << ", weight "
      << ShapeString(w.shape());
  TRELLIS_CHECK(rstd.numel() == N) << kernel << ": x " << ShapeString(x.shape())
                                   << ", rstd " << ShapeString(rstd.shape());
  return C;
}

int64_t Rows(const Tensor& x, int64_t C) { return C == 0 ? 0 : x.numel() / C; }

void CheckEps(const char* kernel, double eps) {
  TRELLIS_CHECK(eps >= 0 && std::isfinite(eps)) << kernel << ": eps " << eps;
}

}  // namespace

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, Tensor& out,
                    Tensor& rstd) {
  const char* kernel = "RmsNormForward";
  TRELLIS_CUDA_DISPATCH(cuda::RmsNormForward(x, w, eps, out, rstd), &x, &w,
                        &out, &rstd);
  RequireCpu(kernel, {&x, &w, &out, &rstd});
  RequireDType(kernel, x.dtype(), {&w, &out, &rstd});
  CheckEps(kernel, eps);
  const int64_t C = CheckShapes(kernel, x, out, w, rstd);
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RmsNormForwardCpu(x.data<T>(), w.data<T>(), Rows(x, C), C,
                      static_cast<T>(eps), out.data<T>(), rstd.data<T>());
  });
}

void AddRmsNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                       double eps, Tensor& sum, Tensor& out, Tensor& rstd) {
  const char* kernel = "AddRmsNormForward";
  TRELLIS_CUDA_DISPATCH(cuda::AddRmsNormForward(a, b, w, eps, sum, out, rstd),
                        &a, &b, &w, &sum, &out, &rstd);
  RequireCpu(kernel, {&a, &b, &w, &sum, &out, &rstd});
  RequireDType(kernel, a.dtype(), {&b, &w, &sum, &out, &rstd});
  CheckEps(kernel, eps);
  const int64_t C = CheckShapes(kernel, a, out, w, rstd);
  TRELLIS_CHECK(b.shape() == a.shape() && sum.shape() == a.shape())
      << kernel << ": a " << ShapeString(a.shape()) << ", b "
      << ShapeString(b.shape()) << ", sum " << ShapeString(sum.shape());
  TRELLIS_CHECK(sum.numel() == 0 || sum.raw() != out.raw())
      << kernel << ": out would overwrite sum";
  DispatchFloat(kernel, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddRmsNormForwardCpu(a.data<T>(), b.data<T>(), w.data<T>(), Rows(a, C), C,
                         static_cast<T>(eps), sum.data<T>(), out.data<T>(),
                         rstd.data<T>());
  });
}

void RmsNormBackwardInput(const Tensor& dout, const Tensor& x, const Tensor& w,
                          const Tensor& rstd, Tensor& dx) {
  const char* kernel = "RmsNormBackwardInput";
  TRELLIS_CUDA_DISPATCH(cuda::RmsNormBackwardInput(dout, x, w, rstd, dx), &dout,
                        &x, &w, &rstd, &dx);
  RequireCpu(kernel, {&dout, &x, &w, &rstd, &dx});
  RequireDType(kernel, x.dtype(), {&dout, &w, &rstd, &dx});
  const int64_t C = CheckShapes(kernel, x, dout, w, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape());
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RmsNormBackwardInputCpu(dout.data<T>(), x.data<T>(), w.data<T>(),
                            rstd.data<T>(), Rows(x, C), C, dx.data<T>(),
                            dx.data<T>());
  });
}

void RmsNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd,
                                  const Tensor& residual, Tensor& dx) {
  const char* kernel = "RmsNormBackwardInputResidual";
  TRELLIS_CUDA_DISPATCH(
      cuda::RmsNormBackwardInputResidual(dout, x, w, rstd, residual, dx), &dout,
      &x, &w, &rstd, &residual, &dx);
  RequireCpu(kernel, {&dout, &x, &w, &rstd, &residual, &dx});
  RequireDType(kernel, x.dtype(), {&dout, &w, &rstd, &residual, &dx});
  const int64_t C = CheckShapes(kernel, x, dout, w, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape() && residual.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape()) << ", residual "
      << ShapeString(residual.shape());
  TRELLIS_CHECK(dx.numel() == 0 ||
                (dx.raw() != dout.raw() && dx.raw() != x.raw()))
      << kernel << ": dx aliases dout or x";
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RmsNormBackwardInputCpu(dout.data<T>(), x.data<T>(), w.data<T>(),
                            rstd.data<T>(), Rows(x, C), C, residual.data<T>(),
                            dx.data<T>());
  });
}

void RmsNormBackwardWeight(const Tensor& dout, const Tensor& x,
                           const Tensor& rstd, Tensor& dw) {
  const char* kernel = "RmsNormBackwardWeight";
  TRELLIS_CUDA_DISPATCH(cuda::RmsNormBackwardWeight(dout, x, rstd, dw), &dout,
                        &x, &rstd, &dw);
  RequireCpu(kernel, {&dout, &x, &rstd, &dw});
  RequireDType(kernel, x.dtype(), {&dout, &rstd, &dw});
  const int64_t C = CheckShapes(kernel, x, dout, dw, rstd);
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RmsNormBackwardWeightCpu(dout.data<T>(), x.data<T>(), rstd.data<T>(),
                             Rows(x, C), C, dw.data<T>());
  });
}

}  // namespace trellis
