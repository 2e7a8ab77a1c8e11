#include "framework/kernels/matmul.h"

#include <algorithm>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::Gemm;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// The problem sizes of one dense layer: N rows, K inputs, M outputs.
struct Dims {
  int64_t N, K, M;
};

// Checks x (..., K) and w (K, M) or (M, K), and returns the sizes.
Dims CheckWeight(const char* kernel, const Tensor& x, const Tensor& w,
                 WeightLayout layout) {
  TRELLIS_CHECK(x.ndim() >= 1 && w.ndim() == 2)
      << kernel << ": x " << ShapeString(x.shape()) << ", w "
      << ShapeString(w.shape());
  const bool in_out = layout == WeightLayout::kInOut;
  const int64_t K = x.dim(-1);
  TRELLIS_CHECK_EQ(in_out ? w.dim(0) : w.dim(1), K)
      << kernel << ": x " << ShapeString(x.shape()) << ", w "
      << ShapeString(w.shape()) << (in_out ? " (in, out)" : " (out, in)");
  int64_t N = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) N *= x.dim(i);
  return Dims{N, K, in_out ? w.dim(1) : w.dim(0)};
}

// Checks y (..., M) with the same leading dimensions as x (..., K).
void CheckRows(const char* kernel, const Tensor& x, const Tensor& y,
               const Dims& d) {
  Shape expected = x.shape();
  expected.back() = d.M;
  TRELLIS_CHECK(y.shape() == expected)
      << kernel << ": x " << ShapeString(x.shape()) << " gives "
      << ShapeString(expected) << ", got " << ShapeString(y.shape());
}

void CheckBias(const char* kernel, const Tensor& bias, const Dims& d) {
  if (!bias.defined()) return;
  TRELLIS_CHECK(bias.ndim() == 1 && bias.dim(0) == d.M)
      << kernel << ": bias " << ShapeString(bias.shape()) << ", " << d.M
      << " outputs";
}

// out (N, M) = x (N, K) @ w + bias: bias rows first, then gemm with beta 1.
template <typename T>
void MatmulForwardCpu(const T* x, const T* w, const T* bias, const Dims& d,
                      bool in_out, T* out) {
  if (bias != nullptr) {
    for (int64_t i = 0; i < d.N; ++i) std::copy_n(bias, d.M, out + i * d.M);
  }
  Gemm<T>(false, !in_out, d.N, d.M, d.K, 1, x, d.K, w, in_out ? d.M : d.K,
          bias != nullptr ? 1 : 0, out, d.M);
}

// dbias (M) += column sums of dout (N, M).
template <typename T>
void ColumnSums(const T* dout, int64_t N, int64_t M, T* __restrict dbias) {
  for (int64_t i = 0; i < N; ++i) {
    const T* row = dout + i * M;
    for (int64_t j = 0; j < M; ++j) dbias[j] += row[j];
  }
}

}  // namespace

void MatmulForward(const Tensor& x, const Tensor& w, const Tensor& bias,
                   Tensor& out, WeightLayout layout) {
  const char* kernel = "MatmulForward";
  TRELLIS_CUDA_DISPATCH(cuda::MatmulForward(x, w, bias, out, layout), &x, &w,
                        &bias, &out);
  RequireCpu(kernel, {&x, &w, &bias, &out});
  RequireDType(kernel, x.dtype(), {&w, &bias, &out});
  const Dims d = CheckWeight(kernel, x, w, layout);
  CheckRows(kernel, x, out, d);
  CheckBias(kernel, bias, d);
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MatmulForwardCpu(x.data<T>(), w.data<T>(),
                     bias.defined() ? bias.data<T>() : nullptr, d,
                     layout == WeightLayout::kInOut, out.data<T>());
  });
}

void MatmulForwardResidual(const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, Tensor& out,
                           WeightLayout layout) {
  const char* kernel = "MatmulForwardResidual";
  TRELLIS_CUDA_DISPATCH(
      cuda::MatmulForwardResidual(x, w, bias, residual, out, layout), &x, &w,
      &bias, &residual, &out);
  RequireCpu(kernel, {&x, &w, &bias, &residual, &out});
  TRELLIS_CHECK(residual.shape() == out.shape())
      << kernel << ": residual " << ShapeString(residual.shape()) << ", out "
      << ShapeString(out.shape());
  TRELLIS_CHECK(out.numel() == 0 || out.raw() != residual.raw())
      << kernel << ": out would overwrite the residual";
  // Two passes on the CPU, as the block ran them before the fusion.
  MatmulForward(x, w, bias, out, layout);
  Add(out, residual, out);
}

void MatmulForwardGelu(const Tensor& x, const Tensor& w, const Tensor& bias,
                       Tensor& pre_gelu, Tensor& out, WeightLayout layout) {
  const char* kernel = "MatmulForwardGelu";
  TRELLIS_CUDA_DISPATCH(
      cuda::MatmulForwardGelu(x, w, bias, pre_gelu, out, layout), &x, &w, &bias,
      &pre_gelu, &out);
  RequireCpu(kernel, {&x, &w, &bias, &pre_gelu, &out});
  RequireDType(kernel, x.dtype(), {&w, &bias, &pre_gelu, &out});
  const Dims d = CheckWeight(kernel, x, w, layout);
  CheckRows(kernel, x, pre_gelu, d);
  CheckRows(kernel, x, out, d);
  CheckBias(kernel, bias, d);
  TRELLIS_CHECK(out.numel() == 0 || out.raw() != pre_gelu.raw())
      << kernel << ": out would overwrite pre_gelu";
  // Two passes on the CPU: OpenBLAS's gemm has no epilogue to run GELU in.
  MatmulForward(x, w, bias, pre_gelu, layout);
  GeluForward(pre_gelu, out);
}

void MatmulBackwardInput(const Tensor& dout, const Tensor& w, Tensor& dx,
                         WeightLayout layout, GradWrite write) {
  const char* kernel = "MatmulBackwardInput";
  TRELLIS_CUDA_DISPATCH(cuda::MatmulBackwardInput(dout, w, dx, layout, write),
                        &dout, &w, &dx);
  RequireCpu(kernel, {&dout, &w, &dx});
  RequireDType(kernel, dx.dtype(), {&dout, &w});
  const Dims d = CheckWeight(kernel, dx, w, layout);
  CheckRows(kernel, dx, dout, d);
  const bool in_out = layout == WeightLayout::kInOut;
  const bool accumulate = write == GradWrite::kAccumulate;
  DispatchFloat(kernel, dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // dx (N, K) (+)= dout (N, M) @ w^T, w^T being (M, K).
    Gemm<T>(false, in_out, d.N, d.K, d.M, 1, dout.data<T>(), d.M, w.data<T>(),
            in_out ? d.M : d.K, accumulate ? 1 : 0, dx.data<T>(), d.K);
  });
}

void MatmulBackwardInputGelu(const Tensor& dout, const Tensor& w,
                             const Tensor& pre_gelu, Tensor& dpre,
                             WeightLayout layout) {
  const char* kernel = "MatmulBackwardInputGelu";
  TRELLIS_CUDA_DISPATCH(
      cuda::MatmulBackwardInputGelu(dout, w, pre_gelu, dpre, layout), &dout, &w,
      &pre_gelu, &dpre);
  RequireCpu(kernel, {&dout, &w, &pre_gelu, &dpre});
  RequireDType(kernel, dpre.dtype(), {&dout, &w, &pre_gelu});
  TRELLIS_CHECK(pre_gelu.shape() == dpre.shape())
      << kernel << ": pre_gelu " << ShapeString(pre_gelu.shape()) << ", dpre "
      << ShapeString(dpre.shape());
  TRELLIS_CHECK(dpre.numel() == 0 || dpre.raw() != pre_gelu.raw())
      << kernel << ": dpre would overwrite pre_gelu";
  // Two passes on the CPU: the GEMM writes dout @ w^T into dpre, which the
  // GELU derivative then scales in place.
  MatmulBackwardInput(dout, w, dpre, layout, GradWrite::kWrite);
  GeluBackwardWrite(pre_gelu, dpre, dpre);
}

void MatmulBackwardWeight(const Tensor& dout, const Tensor& x, Tensor& dw,
                          Tensor& dbias, WeightLayout layout) {
  const char* kernel = "MatmulBackwardWeight";
  TRELLIS_CUDA_DISPATCH(cuda::MatmulBackwardWeight(dout, x, dw, dbias, layout),
                        &dout, &x, &dw, &dbias);
  // The GEMM, and the add of its epilogue's bias gradient.
  trellis_cpu_launches.set_launches(dbias.defined() ? 2 : 1);
  RequireCpu(kernel, {&dout, &x, &dw, &dbias});
  RequireDType(kernel, x.dtype(), {&dout, &dw, &dbias});
  const Dims d = CheckWeight(kernel, x, dw, layout);
  CheckRows(kernel, x, dout, d);
  CheckBias(kernel, dbias, d);
  DispatchFloat(kernel, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (layout == WeightLayout::kInOut) {
      // dw (K, M) += x^T (K, N) @ dout (N, M).
      Gemm<T>(true, false, d.K, d.M, d.N, 1, x.data<T>(), d.K, dout.data<T>(),
              d.M, 1, dw.data<T>(), d.M);
    } else {
      // dw (M, K) += dout^T (M, N) @ x (N, K).
      Gemm<T>(true, false, d.M, d.K, d.N, 1, dout.data<T>(), d.M, x.data<T>(),
              d.K, 1, dw.data<T>(), d.K);
    }
    if (dbias.defined()) {
      ColumnSums(dout.data<T>(), d.N, d.M, dbias.data<T>());
    }
  });
}

}  // namespace trellis
