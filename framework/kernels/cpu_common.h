// Internal to framework/kernels/*.cc: device and dtype dispatch checks, a
// BLAS gemm for float and double, and the math their inner loops share:
// lane-split reductions that GCC vectorizes without -ffast-math, and exp/tanh
// over arrays (SSE2 for float, since libm calls keep a loop scalar and cost
// more than the arithmetic around them).
#ifndef TRELLIS_FRAMEWORK_KERNELS_CPU_COMMON_H_
#define TRELLIS_FRAMEWORK_KERNELS_CPU_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cblas.h>

#include "framework/status.h"
#include "framework/tensor.h"

namespace trellis {
namespace kernels_internal {

// Fails unless every defined tensor lives on the CPU. The CUDA twin of each
// kernel will be dispatched in front of this check.
inline void RequireCpu(const char* kernel,
                       std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      TRELLIS_CHECK(t->device().is_cpu())
          << "no CUDA kernel for " << kernel << " yet (tensor on "
          << DeviceName(t->device()) << ")";
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

// Array math: exp and tanh over n elements. Float runs four lanes at a time
// through SSE2 (a polynomial exp, relative error below 3e-7 in the range a
// softmax uses); double calls std::exp/std::tanh so that double tests check
// the math, not an approximation. Outputs may alias inputs.

#if defined(__SSE2__)
// exp of four floats: x = n·ln2 + r with |r| <= ln2/2, a degree-6 Taylor
// polynomial for exp(r), and 2^n assembled in the exponent bits. Inputs below
// -87.3 give 0, inputs above 88 give exp(88), NaN stays NaN.
inline __m128 Exp4(__m128 x) {
  const __m128 kRound = _mm_set1_ps(12582912.0f);  // 1.5·2^23
  const __m128 xc =
      _mm_min_ps(_mm_max_ps(x, _mm_set1_ps(-87.3f)), _mm_set1_ps(88.0f));
  const __m128 shifted =
      _mm_add_ps(_mm_mul_ps(xc, _mm_set1_ps(1.44269504f)), kRound);
  const __m128 n = _mm_sub_ps(shifted, kRound);  // round(x·log2 e)
  const __m128i ni =
      _mm_sub_epi32(_mm_castps_si128(shifted), _mm_set1_epi32(0x4B400000));
  // ln2 split in two so that n·ln2_hi is exact.
  __m128 r = _mm_sub_ps(xc, _mm_mul_ps(n, _mm_set1_ps(0.693145752f)));
  r = _mm_sub_ps(r, _mm_mul_ps(n, _mm_set1_ps(1.42860677e-6f)));
  __m128 p = _mm_set1_ps(1.0f / 720.0f);
  for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(c));
  }
  const __m128 scale = _mm_castsi128_ps(
      _mm_slli_epi32(_mm_add_epi32(ni, _mm_set1_epi32(127)), 23));
  __m128 e = _mm_mul_ps(p, scale);
  e = _mm_andnot_ps(_mm_cmplt_ps(x, _mm_set1_ps(-87.3f)), e);
  return _mm_or_ps(e, _mm_and_ps(_mm_cmpunord_ps(x, x), x));
}

// Applies fn (a __m128 -> __m128) to x[0, n) into y, the tail through a
// buffer padded with `pad`.
template <typename Fn>
inline void Map4(const float* x, int64_t n, float pad, float* y, Fn fn) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, fn(_mm_loadu_ps(x + i)));
  if (i < n) {
    float buf[4] = {pad, pad, pad, pad};
    std::copy(x + i, x + n, buf);
    _mm_storeu_ps(buf, fn(_mm_loadu_ps(buf)));
    std::copy(buf, buf + (n - i), y + i);
  }
}

// y[i] = exp(x[i] - shift); returns the sum of y.
inline float ExpShiftSum(const float* x, float shift, int64_t n, float* y) {
  const __m128 s = _mm_set1_ps(shift);
  __m128 acc = _mm_setzero_ps();
  Map4(x, n, -INFINITY, y, [&](__m128 v) {
    const __m128 e = Exp4(_mm_sub_ps(v, s));
    acc = _mm_add_ps(acc, e);
    return e;
  });
  float lanes[4];
  _mm_storeu_ps(lanes, acc);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// y[i] = exp(x[i] - shift) · mul.
inline void ExpShiftScale(const float* x, float shift, float mul, int64_t n,
                          float* y) {
  const __m128 s = _mm_set1_ps(shift), m = _mm_set1_ps(mul);
  Map4(x, n, 0.0f, y,
       [&](__m128 v) { return _mm_mul_ps(Exp4(_mm_sub_ps(v, s)), m); });
}

// y[i] = tanh(x[i]) = 1 - 2/(exp(2x) + 1); absolute error about 2e-7.
inline void TanhArray(const float* x, int64_t n, float* y) {
  const __m128 one = _mm_set1_ps(1.0f), two = _mm_set1_ps(2.0f);
  Map4(x, n, 0.0f, y, [&](__m128 v) {
    const __m128 e = Exp4(_mm_mul_ps(v, two));
    return _mm_sub_ps(one, _mm_div_ps(two, _mm_add_ps(e, one)));
  });
}
#else
inline float ExpShiftSum(const float* x, float shift, int64_t n, float* y) {
  float total = 0;
  for (int64_t i = 0; i < n; ++i) total += y[i] = std::exp(x[i] - shift);
  return total;
}
inline void ExpShiftScale(const float* x, float shift, float mul, int64_t n,
                          float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift) * mul;
}
inline void TanhArray(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
#endif  // __SSE2__

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
