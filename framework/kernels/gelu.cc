#include "framework/kernels/gelu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;
using kernels_internal::TanhArray;

// Elements per chunk: tanh runs over a chunk held in a stack buffer, so the
// loops around it stay plain and vectorizable.
constexpr int64_t kChunk = 256;
constexpr double kGeluCube = 0.044715;

template <typename T>
constexpr T SqrtTwoOverPi() {
  return static_cast<T>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);
}

// tanh_u (len) = tanh(sqrt(2/π)·(x + 0.044715·x³)).
template <typename T>
void GeluTanh(const T* x, int64_t len, T* tanh_u) {
  const T k = SqrtTwoOverPi<T>(), c = static_cast<T>(kGeluCube);
  for (int64_t j = 0; j < len; ++j)
    tanh_u[j] = k * (x[j] + c * x[j] * x[j] * x[j]);
  TanhArray(tanh_u, len, tanh_u);
}

// out (n) = 0.5·x·(1 + tanh(u)). out may alias x.
template <typename T>
void GeluForwardCpu(const T* x, int64_t n, T* out) {
  T t[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const T* xi = x + i0;
    T* oi = out + i0;
    GeluTanh(xi, len, t);
    for (int64_t j = 0; j < len; ++j) oi[j] = T{0.5} * xi[j] * (T{1} + t[j]);
  }
}

// dx (n) += dout · (0.5·(1 + t) + 0.5·x·(1 - t²)·sqrt(2/π)·(1 +
// 3·0.044715·x²)), or = when !kAccumulate (then dx may alias dout).
template <bool kAccumulate, typename T>
void GeluBackwardCpu(const T* x, const T* dout, int64_t n, T* dx) {
  const T k = SqrtTwoOverPi<T>(), c3 = static_cast<T>(3 * kGeluCube);
  T t[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t len = std::min(kChunk, n - i0);
    const T* xi = x + i0;
    const T* di = dout + i0;
    T* gi = dx + i0;
    GeluTanh(xi, len, t);
    for (int64_t j = 0; j < len; ++j) {
      const T du = k * (T{1} + c3 * xi[j] * xi[j]);
      const T local =
          T{0.5} * (T{1} + t[j]) + T{0.5} * xi[j] * (T{1} - t[j] * t[j]) * du;
      if constexpr (kAccumulate) {
        gi[j] += local * di[j];
      } else {
        gi[j] = local * di[j];
      }
    }
  }
}

}  // namespace

void GeluForward(const Tensor& x, Tensor& out) {
  TRELLIS_CUDA_DISPATCH(cuda::GeluForward(x, out), &x, &out);
  RequireCpu("GeluForward", {&x, &out});
  RequireDType("GeluForward", x.dtype(), {&out});
  TRELLIS_CHECK(x.shape() == out.shape())
      << "GeluForward: " << ShapeString(x.shape()) << " -> "
      << ShapeString(out.shape());
  DispatchFloat("GeluForward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluForwardCpu(x.data<T>(), x.numel(), out.data<T>());
  });
}

void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  TRELLIS_CUDA_DISPATCH(cuda::GeluBackward(x, dout, dx), &x, &dout, &dx);
  RequireCpu("GeluBackward", {&x, &dout, &dx});
  RequireDType("GeluBackward", x.dtype(), {&dout, &dx});
  TRELLIS_CHECK(x.shape() == dout.shape() && x.shape() == dx.shape())
      << "GeluBackward: x " << ShapeString(x.shape()) << ", dout "
      << ShapeString(dout.shape()) << ", dx " << ShapeString(dx.shape());
  DispatchFloat("GeluBackward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluBackwardCpu<true>(x.data<T>(), dout.data<T>(), x.numel(), dx.data<T>());
  });
}

void GeluBackwardWrite(const Tensor& x, const Tensor& dout, Tensor& dx) {
  const char* kernel = "GeluBackwardWrite";
  TRELLIS_CUDA_DISPATCH(cuda::GeluBackwardWrite(x, dout, dx), &x, &dout, &dx);
  RequireCpu(kernel, {&x, &dout, &dx});
  RequireDType(kernel, x.dtype(), {&dout, &dx});
  TRELLIS_CHECK(x.shape() == dout.shape() && x.shape() == dx.shape())
      << kernel << ": x " << ShapeString(x.shape()) << ", dout "
      << ShapeString(dout.shape()) << ", dx " << ShapeString(dx.shape());
  TRELLIS_CHECK(x.numel() == 0 || x.raw() != dx.raw())
      << kernel << ": dx would overwrite x";
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    GeluBackwardCpu<false>(x.data<T>(), dout.data<T>(), x.numel(),
                           dx.data<T>());
  });
}

}  // namespace trellis
