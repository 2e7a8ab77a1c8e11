#include "framework/kernels/elementwise.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "framework/cuda/cuda_kernels.h"
#include "framework/float16.h"
#include "framework/host_sync.h"
#include "framework/kernels/cpu_common.h"
#include "framework/kernels/layernorm.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::DotLanes;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;
using kernels_internal::SumLanes;

template <typename T>
void AddCpu(const T* a, const T* b, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void AxpyCpu(T alpha, const T* __restrict x, int64_t n, T* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <typename T>
void ScaleCpu(T s, int64_t n, T* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// out (N, M) += bias (M).
template <typename T>
void AddBiasCpu(const T* __restrict bias, int64_t N, int64_t M,
                T* __restrict out) {
  for (int64_t i = 0; i < N; ++i) {
    T* row = out + i * M;
    for (int64_t j = 0; j < M; ++j) row[j] += bias[j];
  }
}

// dbias (M) += column sums of dout (N, M).
template <typename T>
void BiasBackwardCpu(const T* __restrict dout, int64_t N, int64_t M,
                     T* __restrict dbias) {
  for (int64_t i = 0; i < N; ++i) {
    const T* row = dout + i * M;
    for (int64_t j = 0; j < M; ++j) dbias[j] += row[j];
  }
}

// Rows and columns of `out` seen as (N, M) with M = bias.numel().
void CheckBiasShapes(const char* kernel, const Tensor& bias,
                     const Tensor& out) {
  TRELLIS_CHECK_EQ(bias.ndim(), 1)
      << kernel << " bias " << ShapeString(bias.shape());
  TRELLIS_CHECK(out.ndim() >= 1 && out.dim(-1) == bias.dim(0))
      << kernel << ": " << ShapeString(out.shape()) << " vs bias "
      << ShapeString(bias.shape());
}

}  // namespace

void Add(const Tensor& a, const Tensor& b, Tensor& out) {
  TRELLIS_CUDA_DISPATCH(cuda::Add(a, b, out), &a, &b, &out);
  RequireCpu("Add", {&a, &b, &out});
  RequireDType("Add", a.dtype(), {&b, &out});
  TRELLIS_CHECK(a.shape() == b.shape() && a.shape() == out.shape())
      << "Add: " << ShapeString(a.shape()) << " + " << ShapeString(b.shape())
      << " -> " << ShapeString(out.shape());
  DispatchFloat("Add", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddCpu(a.data<T>(), b.data<T>(), a.numel(), out.data<T>());
  });
}

void Axpy(double alpha, const Tensor& x, Tensor& y) {
  TRELLIS_CUDA_DISPATCH(cuda::Axpy(alpha, x, y), &x, &y);
  RequireCpu("Axpy", {&x, &y});
  RequireDType("Axpy", x.dtype(), {&y});
  TRELLIS_CHECK(x.shape() == y.shape())
      << "Axpy: " << ShapeString(x.shape()) << " vs " << ShapeString(y.shape());
  DispatchFloat("Axpy", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AxpyCpu(static_cast<T>(alpha), x.data<T>(), x.numel(), y.data<T>());
  });
}

void ScaleRows(const Tensor& w, Tensor& x) {
  TRELLIS_CUDA_DISPATCH(cuda::ScaleRows(w, x), &w, &x);
  RequireCpu("ScaleRows", {&w, &x});
  const int64_t n = w.numel();
  TRELLIS_CHECK(w.dtype() == DType::kF32 && w.ndim() == 1 && x.ndim() >= 1 &&
                x.dim(0) == n)
      << "ScaleRows: w " << ShapeString(w.shape()) << ", x "
      << ShapeString(x.shape());
  const int64_t m = n == 0 ? 0 : x.numel() / n;
  DispatchFloat("ScaleRows", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      ScaleCpu(static_cast<T>(w.data<float>()[i]), m, x.data<T>() + i * m);
    }
  });
}

void Scale(Tensor& x, double s) {
  TRELLIS_CUDA_DISPATCH(cuda::Scale(x, s), &x);
  RequireCpu("Scale", {&x});
  DispatchFloat("Scale", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ScaleCpu(static_cast<T>(s), x.numel(), x.data<T>());
  });
}

void AddBias(const Tensor& bias, Tensor& out) {
  TRELLIS_CUDA_DISPATCH(cuda::AddBias(bias, out), &bias, &out);
  RequireCpu("AddBias", {&bias, &out});
  RequireDType("AddBias", out.dtype(), {&bias});
  CheckBiasShapes("AddBias", bias, out);
  const int64_t M = bias.dim(0);
  DispatchFloat("AddBias", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AddBiasCpu(bias.data<T>(), M == 0 ? 0 : out.numel() / M, M, out.data<T>());
  });
}

void BiasBackward(const Tensor& dout, Tensor& dbias) {
  TRELLIS_CUDA_DISPATCH(cuda::BiasBackward(dout, dbias), &dout, &dbias);
  RequireCpu("BiasBackward", {&dout, &dbias});
  RequireDType("BiasBackward", dout.dtype(), {&dbias});
  CheckBiasShapes("BiasBackward", dbias, dout);
  const int64_t M = dbias.dim(0);
  DispatchFloat("BiasBackward", dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BiasBackwardCpu(dout.data<T>(), M == 0 ? 0 : dout.numel() / M, M,
                    dbias.data<T>());
  });
}

namespace {

double SumOfSquaresCpu(const Tensor& x) {
  RequireCpu("SumOfSquares", {&x});
  double result = 0;
  DispatchFloat("SumOfSquares", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    result = DotLanes<double>(x.data<T>(), x.data<T>(), x.numel());
  });
  return result;
}

}  // namespace

// The reductions to a host value count one host wait per call on the CPU
// too (framework/host_sync.h); their CUDA twins count their read.
double SumOfSquares(const Tensor& x) {
  TRELLIS_CUDA_DISPATCH(cuda::SumOfSquares(x), &x);
  CountHostWait();
  return SumOfSquaresCpu(x);
}

double SumOfSquares(const std::vector<const Tensor*>& xs) {
  if (xs.empty()) return 0.0;
  TRELLIS_CUDA_DISPATCH(cuda::SumOfSquares(xs), xs.front());
  CountHostWait();
  // A partial pass per tensor and one finishing pass.
  trellis_cpu_launches.set_launches(static_cast<int>(xs.size()) + 1);
  double total = 0;
  for (const Tensor* x : xs) total += SumOfSquaresCpu(*x);
  return total;
}

double Sum(const Tensor& x) {
  TRELLIS_CUDA_DISPATCH(cuda::Sum(x), &x);
  RequireCpu("Sum", {&x});
  CountHostWait();
  double result = 0;
  DispatchFloat("Sum", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    result = SumLanes<double>(x.data<T>(), x.numel());
  });
  return result;
}

void Convert(const Tensor& src, Tensor& dst) {
  TRELLIS_CUDA_DISPATCH(cuda::Convert(src, dst), &src, &dst);
  RequireCpu("Convert", {&src, &dst});
  TRELLIS_CHECK_EQ(src.numel(), dst.numel()) << "Convert";
  TRELLIS_CHECK(IsFloatingDType(src.dtype()) && IsFloatingDType(dst.dtype()))
      << "Convert: " << DTypeName(src.dtype()) << " to "
      << DTypeName(dst.dtype());
  ConvertElements(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel());
}

namespace {

// Rows of a job's dout: all but its last dimension.
int64_t JobRows(const ColumnSumJob& job) {
  TRELLIS_CHECK(job.dout != nullptr && job.db != nullptr)
      << "ColumnSumsMany: a job lacks dout or db";
  const int64_t cols = job.dout->ndim() == 0 ? 1 : job.dout->dim(-1);
  return cols == 0 ? 0 : job.dout->numel() / cols;
}

}  // namespace

void ColumnSumsMany(const std::vector<ColumnSumJob>& jobs) {
  if (jobs.empty()) return;
  // Jobs of several row counts: one call per count, in the order each first
  // appears (the jobs write distinct outputs, so the order changes no sum).
  std::vector<std::pair<int64_t, std::vector<ColumnSumJob>>> by_rows;
  for (const ColumnSumJob& job : jobs) {
    const int64_t rows = JobRows(job);
    auto same = [rows](const auto& group) { return group.first == rows; };
    auto it = std::find_if(by_rows.begin(), by_rows.end(), same);
    if (it == by_rows.end()) it = by_rows.insert(by_rows.end(), {rows, {}});
    it->second.push_back(job);
  }
  if (by_rows.size() > 1) {
    for (const auto& [rows, group] : by_rows) ColumnSumsMany(group);
    return;
  }
  TRELLIS_CUDA_DISPATCH(cuda::ColumnSumsMany(jobs), jobs.front().dout,
                        jobs.front().db);
  for (const ColumnSumJob& job : jobs) {
    if (job.x == nullptr) {
      BiasBackward(*job.dout, *job.db);
    } else {
      TRELLIS_CHECK(job.mean && job.rstd && job.dw)
          << "ColumnSumsMany: a LayerNorm job lacks mean, rstd or dw";
      LayerNormBackwardWeight(*job.dout, *job.x, *job.mean, *job.rstd, *job.dw,
                              *job.db);
    }
  }
}

}  // namespace trellis
