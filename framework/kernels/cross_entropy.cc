#include "framework/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::ExpShiftScale;
using kernels_internal::ExpShiftSum;
using kernels_internal::MaxLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// Columns per chunk when exp values are only summed: they go to a stack
// buffer that stays in L1.
constexpr int64_t kChunk = 1024;

// The rows (N) and columns (Vl) of logits (..., Vl).
struct Dims {
  int64_t N, Vl;
};

// Checks logits (N, Vl), 0 <= valid <= Vl, and every (N) vector given.
Dims CheckShapes(const char* kernel, const Tensor& logits, int64_t valid,
                 std::initializer_list<const Tensor*> rows) {
  TRELLIS_CHECK_GE(logits.ndim(), 1) << kernel;
  Dims d{1, logits.dim(-1)};
  for (int i = 0; i + 1 < logits.ndim(); ++i) d.N *= logits.dim(i);
  TRELLIS_CHECK(valid >= 0 && valid <= d.Vl)
      << kernel << ": " << valid << " valid columns of "
      << ShapeString(logits.shape());
  for (const Tensor* r : rows) {
    TRELLIS_CHECK_EQ(r->numel(), d.N)
        << kernel << ": " << ShapeString(r->shape()) << " for logits "
        << ShapeString(logits.shape());
  }
  return d;
}

void CheckTargets(const char* kernel, const Tensor& targets) {
  TRELLIS_CHECK(targets.dtype() == DType::kI32)
      << kernel << ": targets are " << DTypeName(targets.dtype())
      << ", not int32";
}

// The target's column on this shard, or -1 when another shard holds it.
int64_t LocalColumn(int32_t target, int64_t vocab_start, int64_t valid) {
  const int64_t col = static_cast<int64_t>(target) - vocab_start;
  return col >= 0 && col < valid ? col : -1;
}

template <typename T>
void RowSumExpCpu(const T* logits, const Dims& d, int64_t valid,
                  const T* row_max, T* sumexp) {
  T buf[kChunk];
  for (int64_t i = 0; i < d.N; ++i) {
    const T* row = logits + i * d.Vl;
    T sum = 0;
    for (int64_t j = 0; j < valid; j += kChunk) {
      sum += ExpShiftSum(row + j, row_max[i], std::min(kChunk, valid - j), buf);
    }
    sumexp[i] = sum;
  }
}

// dlogits (N, Vl) = scale · (softmax - onehot) over valid columns, 0 beyond.
// dlogits may alias logits: each element is read before it is written.
template <typename T>
void BackwardCpu(const T* logits, const int32_t* targets, int64_t vocab_start,
                 const Dims& d, int64_t valid, const T* row_max,
                 const T* sumexp, T scale, T* dlogits) {
  for (int64_t i = 0; i < d.N; ++i) {
    const T* row = logits + i * d.Vl;
    T* drow = dlogits + i * d.Vl;
    ExpShiftScale(row, row_max[i], scale / sumexp[i], valid, drow);
    std::fill(drow + valid, drow + d.Vl, T{0});
    const int64_t col = LocalColumn(targets[i], vocab_start, valid);
    if (col >= 0) drow[col] -= scale;
  }
}

// One row at a time, while it is in cache: max, sum of exponentials, loss,
// then the gradient over the row (which dlogits may alias).
template <typename T>
void FusedCpu(const T* logits, const int32_t* targets, const Dims& d,
              int64_t valid, const float* weights, T scale, T* losses,
              T* dlogits) {
  T buf[kChunk];
  for (int64_t i = 0; i < d.N; ++i) {
    const T* row = logits + i * d.Vl;
    const T m = MaxLanes(row, valid);
    T sum = 0;
    for (int64_t j = 0; j < valid; j += kChunk) {
      sum += ExpShiftSum(row + j, m, std::min(kChunk, valid - j), buf);
    }
    // (A target outside the columns adds no logit, as on a vocabulary
    // shard that does not hold it.)
    const int64_t target = LocalColumn(targets[i], 0, valid);
    const T w = weights != nullptr ? static_cast<T>(weights[i]) : T{1};
    const T z = target >= 0 ? row[target] : T{0};
    losses[i] = (std::log(sum) + m - z) * w;
    if (dlogits == nullptr) continue;
    T* drow = dlogits + i * d.Vl;
    const T g = scale * w;
    ExpShiftScale(row, m, g / sum, valid, drow);
    std::fill(drow + valid, drow + d.Vl, T{0});
    if (target >= 0) drow[target] -= g;
  }
}

}  // namespace

void CrossEntropyRowMax(const Tensor& logits, int64_t valid, Tensor& row_max) {
  const char* kernel = "CrossEntropyRowMax";
  TRELLIS_CUDA_DISPATCH(cuda::CrossEntropyRowMax(logits, valid, row_max),
                        &logits, &row_max);
  RequireCpu(kernel, {&logits, &row_max});
  RequireDType(kernel, logits.dtype(), {&row_max});
  const Dims d = CheckShapes(kernel, logits, valid, {&row_max});
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* out = row_max.data<T>();
    for (int64_t i = 0; i < d.N; ++i) out[i] = MaxLanes(x + i * d.Vl, valid);
  });
}

void CrossEntropyRowSumExp(const Tensor& logits, int64_t valid,
                           const Tensor& row_max, Tensor& sumexp) {
  const char* kernel = "CrossEntropyRowSumExp";
  TRELLIS_CUDA_DISPATCH(
      cuda::CrossEntropyRowSumExp(logits, valid, row_max, sumexp), &logits,
      &row_max, &sumexp);
  RequireCpu(kernel, {&logits, &row_max, &sumexp});
  RequireDType(kernel, logits.dtype(), {&row_max, &sumexp});
  const Dims d = CheckShapes(kernel, logits, valid, {&row_max, &sumexp});
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    RowSumExpCpu(logits.data<T>(), d, valid, row_max.data<T>(),
                 sumexp.data<T>());
  });
}

void CrossEntropyTargetLogit(const Tensor& logits, const Tensor& targets,
                             int64_t vocab_start, int64_t valid,
                             Tensor& target_logit) {
  const char* kernel = "CrossEntropyTargetLogit";
  TRELLIS_CUDA_DISPATCH(cuda::CrossEntropyTargetLogit(
                            logits, targets, vocab_start, valid, target_logit),
                        &logits, &targets, &target_logit);
  RequireCpu(kernel, {&logits, &targets, &target_logit});
  RequireDType(kernel, logits.dtype(), {&target_logit});
  CheckTargets(kernel, targets);
  const Dims d = CheckShapes(kernel, logits, valid, {&targets, &target_logit});
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    const int32_t* t = targets.data<int32_t>();
    T* out = target_logit.data<T>();
    for (int64_t i = 0; i < d.N; ++i) {
      const int64_t col = LocalColumn(t[i], vocab_start, valid);
      out[i] = col >= 0 ? x[i * d.Vl + col] : T{0};
    }
  });
}

void CrossEntropyLoss(const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, Tensor& losses) {
  const char* kernel = "CrossEntropyLoss";
  TRELLIS_CUDA_DISPATCH(
      cuda::CrossEntropyLoss(row_max, sumexp, target_logit, losses), &row_max,
      &sumexp, &target_logit, &losses);
  RequireCpu(kernel, {&row_max, &sumexp, &target_logit, &losses});
  RequireDType(kernel, row_max.dtype(), {&sumexp, &target_logit, &losses});
  const int64_t N = row_max.numel();
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&sumexp, &target_logit, &losses}) {
    TRELLIS_CHECK_EQ(t->numel(), N) << kernel << ": " << ShapeString(t->shape())
                                    << " vs " << ShapeString(row_max.shape());
  }
  DispatchFloat(kernel, row_max.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* m = row_max.data<T>();
    const T* s = sumexp.data<T>();
    const T* z = target_logit.data<T>();
    T* out = losses.data<T>();
    for (int64_t i = 0; i < N; ++i) out[i] = std::log(s[i]) + m[i] - z[i];
  });
}

void CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                          int64_t vocab_start, int64_t valid,
                          const Tensor& row_max, const Tensor& sumexp,
                          double scale, Tensor& dlogits) {
  const char* kernel = "CrossEntropyBackward";
  TRELLIS_CUDA_DISPATCH(
      cuda::CrossEntropyBackward(logits, targets, vocab_start, valid, row_max,
                                 sumexp, scale, dlogits),
      &logits, &targets, &row_max, &sumexp, &dlogits);
  RequireCpu(kernel, {&logits, &targets, &row_max, &sumexp, &dlogits});
  RequireDType(kernel, logits.dtype(), {&row_max, &sumexp, &dlogits});
  CheckTargets(kernel, targets);
  const Dims d =
      CheckShapes(kernel, logits, valid, {&targets, &row_max, &sumexp});
  TRELLIS_CHECK(dlogits.shape() == logits.shape())
      << kernel << ": dlogits " << ShapeString(dlogits.shape()) << ", logits "
      << ShapeString(logits.shape());
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BackwardCpu(logits.data<T>(), targets.data<int32_t>(), vocab_start, d,
                valid, row_max.data<T>(), sumexp.data<T>(),
                static_cast<T>(scale), dlogits.data<T>());
  });
}

void CrossEntropyFused(const Tensor& logits, const Tensor& targets,
                       int64_t valid, const Tensor& row_weights, double scale,
                       Tensor& losses, Tensor& dlogits) {
  const char* kernel = "CrossEntropyFused";
  TRELLIS_CUDA_DISPATCH(
      cuda::CrossEntropyFused(logits, targets, valid, row_weights, scale,
                              losses, dlogits),
      &logits, &targets, &row_weights, &losses, &dlogits);
  RequireCpu(kernel, {&logits, &targets, &row_weights, &losses, &dlogits});
  RequireDType(kernel, logits.dtype(), {&losses, &dlogits});
  RequireDType(kernel, DType::kF32, {&row_weights});
  CheckTargets(kernel, targets);
  const Dims d = CheckShapes(kernel, logits, valid, {&targets, &losses});
  if (row_weights.defined()) CheckShapes(kernel, logits, valid, {&row_weights});
  TRELLIS_CHECK(!dlogits.defined() || dlogits.shape() == logits.shape())
      << kernel << ": dlogits " << ShapeString(dlogits.shape()) << ", logits "
      << ShapeString(logits.shape());
  DispatchFloat(kernel, logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    FusedCpu(logits.data<T>(), targets.data<int32_t>(), d, valid,
             row_weights.defined() ? row_weights.data<float>() : nullptr,
             static_cast<T>(scale), losses.data<T>(),
             dlogits.defined() ? dlogits.data<T>() : nullptr);
  });
}

}  // namespace trellis
