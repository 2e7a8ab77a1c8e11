// Helpers shared by the kernel tests: random tensors, dtype casts, and
// central finite differences for checking backward passes in double.
#ifndef TRELLIS_TESTS_FRAMEWORK_KERNEL_TEST_UTIL_H_
#define TRELLIS_TESTS_FRAMEWORK_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "framework/tensor.h"

namespace trellis {
namespace kernel_test {

// Element i of a float32 or float64 CPU tensor, as double.
inline double Get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.data<double>()[i] : t.data<float>()[i];
}

inline void Set(Tensor& t, int64_t i, double value) {
  if (t.dtype() == DType::kF64) {
    t.data<double>()[i] = value;
  } else {
    t.data<float>()[i] = static_cast<float>(value);
  }
}

// Uniform values in [lo, hi), the same for float32 and float64 given a seed.
inline Tensor Random(Shape shape, uint64_t seed, DType dtype = DType::kF64,
                     double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::Empty(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) Set(t, i, dist(rng));
  return t;
}

// A float32/float64 copy of a float32/float64 tensor.
inline Tensor Cast(const Tensor& t, DType dtype) {
  Tensor out = Tensor::Empty(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) Set(out, i, Get(t, i));
  return out;
}

// sum(a ⊙ b) in double: the scalar loss whose gradient with respect to a is b.
inline double Dot(const Tensor& a, const Tensor& b) {
  double total = 0;
  for (int64_t i = 0; i < a.numel(); ++i) total += Get(a, i) * Get(b, i);
  return total;
}

// Central differences of loss() with respect to each element of x, which is
// perturbed in place and restored.
inline Tensor NumericGradient(const std::function<double()>& loss, Tensor& x,
                              double h = 1e-5) {
  Tensor grad = Tensor::Zeros(x.shape(), DType::kF64);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = Get(x, i);
    Set(x, i, x0 + h);
    const double up = loss();
    Set(x, i, x0 - h);
    const double down = loss();
    Set(x, i, x0);
    grad.data<double>()[i] = (up - down) / (2 * h);
  }
  return grad;
}

// max |a - b| / max |b| (the error relative to the largest entry).
inline double RelError(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 1e-300;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(Get(a, i) - Get(b, i)));
    scale = std::max(scale, std::abs(Get(b, i)));
  }
  return diff / scale;
}

// max |scale_a · a - b| / max |b| over columns [begin, end) of each row of
// width W: one band of a fused tensor, such as dQ, dK or dV of a (B, T, 3C)
// attention gradient. Where b is zero all over the band (dQ and dK with a
// single key), the error is taken against the whole of b's largest entry
// instead: the ~1e-7 that rounding leaves there is no error next to the
// gradient, but infinitely many times a zero.
inline double BandError(const Tensor& a, const Tensor& b, int64_t W,
                        int64_t begin, int64_t end, double scale_a = 1.0) {
  double diff = 0, band = 0, whole = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double y = std::abs(Get(b, i));
    whole = std::max(whole, y);
    const int64_t col = i % W;
    if (col < begin || col >= end) continue;
    diff = std::max(diff, std::abs(scale_a * Get(a, i) - Get(b, i)));
    band = std::max(band, y);
  }
  return diff / std::max(band > 0 ? band : whole, 1e-300);
}

// doc_start (B, T) int32 for documents of the given lengths in each row
// (attention.h's document masking): each token's document's first
// position. REQUIRES: each row's lengths add up to T.
inline Tensor DocStarts(const std::vector<std::vector<int64_t>>& lengths,
                        int64_t T) {
  Tensor s =
      Tensor::Empty({static_cast<int64_t>(lengths.size()), T}, DType::kI32);
  for (size_t b = 0; b < lengths.size(); ++b) {
    int64_t t = 0;
    for (int64_t len : lengths[b]) {
      for (int64_t i = 0; i < len; ++i) {
        s.data<int32_t>()[b * T + t + i] = static_cast<int32_t>(t);
      }
      t += len;
    }
    TRELLIS_CHECK_EQ(t, T) << "document lengths of row " << b;
  }
  return s;
}

// Every element of t multiplied by s, into a new float64 tensor.
inline Tensor Scaled(const Tensor& t, double s) {
  Tensor out = Tensor::Empty(t.shape(), DType::kF64);
  for (int64_t i = 0; i < t.numel(); ++i) Set(out, i, s * Get(t, i));
  return out;
}

}  // namespace kernel_test
}  // namespace trellis

#endif  // TRELLIS_TESTS_FRAMEWORK_KERNEL_TEST_UTIL_H_
