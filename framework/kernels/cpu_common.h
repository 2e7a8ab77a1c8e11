// Internal to framework/kernels/*.cc: device and dtype dispatch checks, a
// BLAS gemm for float and double, and the math their inner loops share:
// lane-split reductions that GCC vectorizes without -ffast-math, and exp/tanh
// over arrays (hand-vectorized for float, since libm calls keep a loop scalar
// and cost more than the arithmetic around them).
#ifndef TRELLIS_FRAMEWORK_KERNELS_CPU_COMMON_H_
#define TRELLIS_FRAMEWORK_KERNELS_CPU_COMMON_H_

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "framework/status.h"
#include "framework/tensor.h"

namespace trellis {
namespace kernels_internal {

// Fails unless every defined tensor lives on the CPU. The CUDA twin of each
// kernel is dispatched in front of this check (TRELLIS_CUDA_DISPATCH), so
// only a build without CUDA gets here with a CUDA tensor.
inline void RequireCpu(const char* kernel,
                       std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      TRELLIS_CHECK(t->device().is_cpu())
          << kernel << ": tensor on " << DeviceName(t->device())
          << ", but this build has no CUDA backend (-DTRELLIS_CUDA=ON)";
    }
  }
}

// Fails unless every defined tensor has `dtype`.
inline void RequireDType(const char* kernel, DType dtype,
                         std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      TRELLIS_CHECK(t->dtype() == dtype)
          << kernel << ": " << DTypeName(t->dtype()) << " tensor, expected "
          << DTypeName(dtype);
    }
  }
}

// Calls fn(T{}) with T = float or double after `dtype`.
template <typename Fn>
void DispatchFloat(const char* kernel, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(float{});
      return;
    case DType::kF64:
      fn(double{});
      return;
    default:
      TRELLIS_CHECK(false) << kernel << " has no CPU kernel for "
                           << DTypeName(dtype);
  }
}

// Row-major C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C, op
// transposing when asked; lda/ldb/ldc are row strides. OpenBLAS sgemm/dgemm,
// with the empty cases (which BLAS rejects or mishandles) done here.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
          int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == T{1}) return;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        C[i * ldc + j] = beta == T{0} ? T{0} : beta * C[i * ldc + j];
      }
    }
    return;
  }
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  TRELLIS_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax &&
                ldb <= kMax && ldc <= kMax)
      << "gemm dimensions exceed the BLAS integer: " << M << "x" << N << "x"
      << K;
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
  } else {
    static_assert(std::is_same_v<T, double>);
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
  }
}

// Reductions over n elements with 8 independent accumulators, so that the
// loop vectorizes without reassociation flags. `Acc` is the sum's type.
inline constexpr int kLanes = 8;

template <typename Acc, typename T>
inline Acc SumLanes(const T* x, int64_t n) {
  Acc lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<Acc>(x[i + j]);
  }
  Acc total = 0;
  for (; i < n; ++i) total += static_cast<Acc>(x[i]);
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

template <typename Acc, typename T>
inline Acc DotLanes(const T* a, const T* b, int64_t n) {
  Acc lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lane[j] += static_cast<Acc>(a[i + j]) * static_cast<Acc>(b[i + j]);
    }
  }
  Acc total = 0;
  for (; i < n; ++i) total += static_cast<Acc>(a[i]) * static_cast<Acc>(b[i]);
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}

// max over x[0, n); -inf when n == 0.
template <typename T>
inline T MaxLanes(const T* x, int64_t n) {
  T lane[kLanes];
  std::fill_n(lane, kLanes, -INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    }
  }
  T best = -INFINITY;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  for (int j = 0; j < kLanes; ++j) best = lane[j] > best ? lane[j] : best;
  return best;
}

// Array math: exp and tanh over n elements; outputs may alias inputs.
// Float uses a polynomial exp (cpu_common.cc) with a relative error below
// 3e-7 over the range a softmax uses, eight lanes at a time with AVX2 and FMA
// where the CPU has them, four with SSE2 otherwise; inputs below -87.3 give
// 0, above 88 give exp(88), NaN stays NaN. Double calls std::exp/std::tanh
// so that double tests check the math, not an approximation.

// The instruction sets the float array math can run on. kNone calls libm.
enum class Simd { kNone, kSse2, kAvx2Fma };
// The widest one this CPU runs (fixed for the life of the process).
Simd BestSimd();

// y[i] = exp(x[i] - shift); returns the sum of y.
float ExpShiftSum(const float* x, float shift, int64_t n, float* y,
                  Simd simd = BestSimd());
// y[i] = exp(x[i] - shift) · mul.
void ExpShiftScale(const float* x, float shift, float mul, int64_t n, float* y,
                   Simd simd = BestSimd());
// y[i] = tanh(x[i]), as 1 - 2/(exp(2x) + 1): absolute error about 2e-7.
void TanhArray(const float* x, int64_t n, float* y, Simd simd = BestSimd());

inline double ExpShiftSum(const double* x, double shift, int64_t n, double* y) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      lane[j] += y[i + j] = std::exp(x[i + j] - shift);
  }
  double total = 0;
  for (; i < n; ++i) total += y[i] = std::exp(x[i] - shift);
  for (int j = 0; j < kLanes; ++j) total += lane[j];
  return total;
}
inline void ExpShiftScale(const double* x, double shift, double mul, int64_t n,
                          double* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift) * mul;
}
inline void TanhArray(const double* x, int64_t n, double* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace kernels_internal
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_CPU_COMMON_H_
