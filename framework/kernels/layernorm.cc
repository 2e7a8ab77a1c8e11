#include "framework/kernels/layernorm.h"

#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::kLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;
using kernels_internal::SumLanes;

// Sum of (x[i] - mean)² in lanes, so that the loop vectorizes.
template <typename T>
T SumSquaredDeviation(const T* x, T mean, int64_t n) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const T d = x[i + j] - mean;
      lane[j] += d * d;
    }
  }
  T total = 0;
  for (; i < n; ++i) total += (x[i] - mean) * (x[i] - mean);
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

// One row: x (C), w (C), b (C) -> out (C), *mean, *rstd. The plain and the
// fused (residual add first) forward both call it, so they agree bit for bit.
template <typename T>
void LayerNormRow(const T* x, const T* w, const T* b, int64_t C, T* out,
                  T* mean, T* rstd) {
  const T m = SumLanes<T>(x, C) / static_cast<T>(C);
  const T var = SumSquaredDeviation(x, m, C) / static_cast<T>(C);
  const T s = T{1} / std::sqrt(var + static_cast<T>(kLayerNormEps));
  for (int64_t c = 0; c < C; ++c) out[c] = (x[c] - m) * s * w[c] + b[c];
  *mean = m;
  *rstd = s;
}

// x (N, C), w (C), b (C) -> out (N, C), mean (N), rstd (N).
template <typename T>
void LayerNormForwardCpu(const T* x, const T* w, const T* b, int64_t N,
                         int64_t C, T* out, T* mean, T* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    LayerNormRow(x + i * C, w, b, C, out + i * C, mean + i, rstd + i);
  }
}

// sum (N, C) = a + b, then out (N, C), mean (N), rstd (N) = LayerNorm(sum)
// with weight w and bias `bias`, row by row so that each sum row is still in
// cache when it is normalized. sum may alias a or b: each element is read
// before it is written.
template <typename T>
void AddLayerNormForwardCpu(const T* a, const T* b, const T* w, const T* bias,
                            int64_t N, int64_t C, T* sum, T* out, T* mean,
                            T* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    const T* ai = a + i * C;
    const T* bi = b + i * C;
    T* si = sum + i * C;
    for (int64_t c = 0; c < C; ++c) si[c] = ai[c] + bi[c];
    LayerNormRow(si, w, bias, C, out + i * C, mean + i, rstd + i);
  }
}

// dx (N, C) = base + rstd · (g - mean(g) - xhat · mean(g · xhat)),
// g = dout · w; base (N, C) is dx itself to accumulate, or a residual
// gradient (which may alias dx).
template <typename T>
void LayerNormBackwardInputCpu(const T* dout, const T* x, const T* w,
                               const T* mean, const T* rstd, int64_t N,
                               int64_t C, const T* base, T* dx) {
  for (int64_t i = 0; i < N; ++i) {
    const T* di = dout + i * C;
    const T* xi = x + i * C;
    const T* bi = base + i * C;
    T* dxi = dx + i * C;
    const T m = mean[i], s = rstd[i];
    T sum_g[kLanes] = {}, sum_gx[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= C; c += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const T g = di[c + j] * w[c + j];
        sum_g[j] += g;
        sum_gx[j] += g * (xi[c + j] - m) * s;
      }
    }
    T g_mean = 0, gx_mean = 0;
    for (; c < C; ++c) {
      g_mean += di[c] * w[c];
      gx_mean += di[c] * w[c] * (xi[c] - m) * s;
    }
    for (int j = 0; j < kLanes; ++j) {
      g_mean += sum_g[j];
      gx_mean += sum_gx[j];
    }
    g_mean /= static_cast<T>(C);
    gx_mean /= static_cast<T>(C);
    for (int64_t k = 0; k < C; ++k) {
      const T xhat = (xi[k] - m) * s;
      dxi[k] = bi[k] + s * (di[k] * w[k] - g_mean - xhat * gx_mean);
    }
  }
}

// dw (C) += sum over rows of dout · xhat, db (C) += sum over rows of dout.
template <typename T>
void LayerNormBackwardWeightCpu(const T* dout, const T* x, const T* mean,
                                const T* rstd, int64_t N, int64_t C,
                                T* __restrict dw, T* __restrict db) {
  for (int64_t i = 0; i < N; ++i) {
    const T* di = dout + i * C;
    const T* xi = x + i * C;
    const T m = mean[i], s = rstd[i];
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += di[c] * (xi[c] - m) * s;
      db[c] += di[c];
    }
  }
}

// Checks x (N, C) against `other` (same shape), a (C) vector and mean/rstd
// (N), and returns C.
int64_t CheckShapes(const char* kernel, const Tensor& x, const Tensor& other,
                    const Tensor& vec, const Tensor& mean, const Tensor& rstd) {
  TRELLIS_CHECK(x.ndim() >= 1 && x.shape() == other.shape())
      << kernel << ": " << ShapeString(x.shape()) << " vs "
      << ShapeString(other.shape());
  const int64_t C = x.dim(-1);
  const int64_t N = C == 0 ? 0 : x.numel() / C;
  TRELLIS_CHECK(vec.ndim() == 1 && vec.dim(0) == C)
      << kernel << ": x " << ShapeString(x.shape()) << ", weight "
      << ShapeString(vec.shape());
  TRELLIS_CHECK(mean.numel() == N && rstd.numel() == N)
      << kernel << ": x " << ShapeString(x.shape()) << ", mean "
      << ShapeString(mean.shape()) << ", rstd " << ShapeString(rstd.shape());
  return C;
}

int64_t Rows(const Tensor& x, int64_t C) { return C == 0 ? 0 : x.numel() / C; }

}  // namespace

void LayerNormForward(const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& out, Tensor& mean, Tensor& rstd) {
  const char* kernel = "LayerNormForward";
  TRELLIS_CUDA_DISPATCH(cuda::LayerNormForward(x, w, b, out, mean, rstd), &x,
                        &w, &b, &out, &mean, &rstd);
  RequireCpu(kernel, {&x, &w, &b, &out, &mean, &rstd});
  RequireDType(kernel, x.dtype(), {&w, &b, &out, &mean, &rstd});
  const int64_t C = CheckShapes(kernel, x, out, w, mean, rstd);
  TRELLIS_CHECK(b.shape() == w.shape())
      << kernel << " bias " << ShapeString(b.shape());
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormForwardCpu(x.data<T>(), w.data<T>(), b.data<T>(), Rows(x, C), C,
                        out.data<T>(), mean.data<T>(), rstd.data<T>());
  });
}

void AddLayerNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                         const Tensor& bias, Tensor& sum, Tensor& out,
                         Tensor& mean, Tensor& rstd) {
  const char* kernel = "AddLayerNormForward";
  TRELLIS_CUDA_DISPATCH(
      cuda::AddLayerNormForward(a, b, w, bias, sum, out, mean, rstd), &a, &b,
      &w, &bias, &sum, &out, &mean, &rstd);
  RequireCpu(kernel, {&a, &b, &w, &bias, &sum, &out, &mean, &rstd});
  RequireDType(kernel, a.dtype(), {&b, &w, &bias, &sum, &out, &mean, &rstd});
  const int64_t C = CheckShapes(kernel, a, out, w, mean, rstd);
  TRELLIS_CHECK(b.shape() == a.shape() && sum.shape() == a.shape())
      << kernel << ": a " << ShapeString(a.shape()) << ", b "
      << ShapeString(b.shape()) << ", sum " << ShapeString(sum.shape());
  TRELLIS_CHECK(bias.shape() == w.shape())
      << kernel << " bias " << ShapeString(bias.shape());
  TRELLIS_CHECK(sum.numel() == 0 || sum.raw() != out.raw())
      << kernel << ": out would overwrite sum";
  DispatchFloat(kernel, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddLayerNormForwardCpu(a.data<T>(), b.data<T>(), w.data<T>(),
                           bias.data<T>(), Rows(a, C), C, sum.data<T>(),
                           out.data<T>(), mean.data<T>(), rstd.data<T>());
  });
}

void LayerNormBackwardInput(const Tensor& dout, const Tensor& x,
                            const Tensor& w, const Tensor& mean,
                            const Tensor& rstd, Tensor& dx) {
  const char* kernel = "LayerNormBackwardInput";
  TRELLIS_CUDA_DISPATCH(
      cuda::LayerNormBackwardInput(dout, x, w, mean, rstd, dx), &dout, &x, &w,
      &mean, &rstd, &dx);
  RequireCpu(kernel, {&dout, &x, &w, &mean, &rstd, &dx});
  RequireDType(kernel, x.dtype(), {&dout, &w, &mean, &rstd, &dx});
  const int64_t C = CheckShapes(kernel, x, dout, w, mean, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape());
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardInputCpu(dout.data<T>(), x.data<T>(), w.data<T>(),
                              mean.data<T>(), rstd.data<T>(), Rows(x, C), C,
                              dx.data<T>(), dx.data<T>());
  });
}

void LayerNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                    const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& residual,
                                    Tensor& dx) {
  const char* kernel = "LayerNormBackwardInputResidual";
  TRELLIS_CUDA_DISPATCH(cuda::LayerNormBackwardInputResidual(
                            dout, x, w, mean, rstd, residual, dx),
                        &dout, &x, &w, &mean, &rstd, &residual, &dx);
  RequireCpu(kernel, {&dout, &x, &w, &mean, &rstd, &residual, &dx});
  RequireDType(kernel, x.dtype(), {&dout, &w, &mean, &rstd, &residual, &dx});
  const int64_t C = CheckShapes(kernel, x, dout, w, mean, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape() && residual.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape()) << ", residual "
      << ShapeString(residual.shape());
  TRELLIS_CHECK(dx.numel() == 0 ||
                (dx.raw() != dout.raw() && dx.raw() != x.raw()))
      << kernel << ": dx aliases dout or x";
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardInputCpu(dout.data<T>(), x.data<T>(), w.data<T>(),
                              mean.data<T>(), rstd.data<T>(), Rows(x, C), C,
                              residual.data<T>(), dx.data<T>());
  });
}

void LayerNormBackwardWeight(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, Tensor& dw,
                             Tensor& db) {
  const char* kernel = "LayerNormBackwardWeight";
  TRELLIS_CUDA_DISPATCH(
      cuda::LayerNormBackwardWeight(dout, x, mean, rstd, dw, db), &dout, &x,
      &mean, &rstd, &dw, &db);
  RequireCpu(kernel, {&dout, &x, &mean, &rstd, &dw, &db});
  RequireDType(kernel, x.dtype(), {&dout, &mean, &rstd, &dw, &db});
  const int64_t C = CheckShapes(kernel, x, dout, dw, mean, rstd);
  TRELLIS_CHECK(db.shape() == dw.shape())
      << kernel << " db " << ShapeString(db.shape());
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    LayerNormBackwardWeightCpu(dout.data<T>(), x.data<T>(), mean.data<T>(),
                               rstd.data<T>(), Rows(x, C), C, dw.data<T>(),
                               db.data<T>());
  });
}

}  // namespace trellis
