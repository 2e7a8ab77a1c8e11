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

// x (N, C), w (C), b (C) -> out (N, C), mean (N), rstd (N).
template <typename T>
void LayerNormForwardCpu(const T* x, const T* w, const T* b, int64_t N,
                         int64_t C, T* out, T* mean, T* rstd) {
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    T* oi = out + i * C;
    const T m = SumLanes<T>(xi, C) / static_cast<T>(C);
    const T var = SumSquaredDeviation(xi, m, C) / static_cast<T>(C);
    const T s = T{1} / std::sqrt(var + static_cast<T>(kLayerNormEps));
    for (int64_t c = 0; c < C; ++c) oi[c] = (xi[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

// dx (N, C) += rstd · (g - mean(g) - xhat · mean(g · xhat)), g = dout · w.
template <typename T>
void LayerNormBackwardInputCpu(const T* dout, const T* x, const T* w,
                               const T* mean, const T* rstd, int64_t N,
                               int64_t C, T* dx) {
  for (int64_t i = 0; i < N; ++i) {
    const T* di = dout + i * C;
    const T* xi = x + i * C;
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
      dxi[k] += s * (di[k] * w[k] - g_mean - xhat * gx_mean);
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
                              dx.data<T>());
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
