// Dense layers on CUDA through cuBLASLt (cuda_kernels.h).
//
// Row-major (N, M) = (N, K) @ (K, M) is computed as the column-major
// product out^T (M, N) = W^T (M, K) · x^T (K, N): a row-major matrix is its
// transpose in column-major terms, so no data moves. Bias (and GELU) ride in
// the GEMM's epilogue. Compute is float32 (CUBLAS_COMPUTE_32F, no TF32), for
// float32 or bfloat16 operands.
//
// Backward GEMMs use beta = 1 to accumulate or beta = 0 to write
// (GradWrite); the input gradient through GELU runs GELU's derivative in the
// DGELU epilogue, and the weight gradient forms the bias gradient in the
// BGRADA / BGRADB epilogue (into float32 scratch, then added).
//
// When cuBLASLt's heuristic offers no algorithm (unusual alignments, an
// epilogue this GPU or library lacks), the GEMM runs through cublasGemmEx
// and the epilogue's work through kernels (bias add, GeluForward,
// GeluBackwardWrite, column sums); the first such fallback of each epilogue
// kind prints one line to stderr per thread and device.
//
// The GEMMs run through cublaslt_gemm.h (the cached cuBLASLt plans).

#include <algorithm>
#include <cstdint>

#include "framework/cuda/cublaslt_gemm.h"
#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"
#include "framework/launch_count.h"

namespace trellis {
namespace cuda {
namespace {

using cublaslt::Alignment;
using cublaslt::FallbackGemm;
using cublaslt::Gemm;
using cublaslt::ReportFallback;
using cublaslt::TryLtGemm;
using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;

// Runs `g` (epilogue none or bias): cuBLASLt when it has an algorithm, else
// cublasGemmEx and the bias kernel.
void RunGemm(int device, const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  TRELLIS_CHECK_GT(g.k, 0) << "empty inner dimension reaches the GEMM ";
  if (TryLtGemm(device, g)) return;
  TRELLIS_CHECK(g.epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                g.epilogue == CUBLASLT_EPILOGUE_BIAS)
      << "no fallback for cuBLASLt epilogue " << g.epilogue;
  if (g.epilogue != CUBLASLT_EPILOGUE_DEFAULT) ReportFallback(device, g);
  FallbackGemm(device, g);
  if (g.bias != nullptr) {
    // Column-major D (m, n) is row-major (n, m): bias runs along rows.
    cuda_launch::AddBias(g.d_type == CUDA_R_32F ? cuda_launch::Elem::kF32
                                                : cuda_launch::Elem::kBF16,
                         g.bias, g.d, g.n, g.m);
  }
}

cudaDataType_t CudaType(const char* kernel, const Tensor& t) {
  return ElemOf(kernel, t) == cuda_launch::Elem::kF32 ? CUDA_R_32F
                                                      : CUDA_R_16BF;
}

// The problem sizes of one dense layer: N rows, K inputs, M outputs.
struct Dims {
  int64_t N, K, M;
};

// Checks x (..., K), w (K, M) or (M, K), y (..., M) with x's leading
// dimensions and bias (M) when defined; returns the sizes.
Dims CheckDense(const char* kernel, const Tensor& x, const Tensor& w,
                const Tensor& y, const Tensor& bias, WeightLayout layout) {
  TRELLIS_CHECK(x.ndim() >= 1 && w.ndim() == 2)
      << kernel << ": x " << ShapeString(x.shape()) << ", w "
      << ShapeString(w.shape());
  const bool in_out = layout == WeightLayout::kInOut;
  // N from x's leading dimensions, so that with K = 0 the rows still get
  // their bias (cuda_internal::Rows counts no rows of width 0).
  int64_t rows = 1;
  for (int i = 0; i + 1 < x.ndim(); ++i) rows *= x.dim(i);
  const Dims d{rows, x.dim(-1), in_out ? w.dim(1) : w.dim(0)};
  TRELLIS_CHECK_EQ(in_out ? w.dim(0) : w.dim(1), d.K)
      << kernel << ": x " << ShapeString(x.shape()) << ", w "
      << ShapeString(w.shape()) << (in_out ? " (in, out)" : " (out, in)");
  Shape expected = x.shape();
  expected.back() = d.M;
  TRELLIS_CHECK(y.shape() == expected)
      << kernel << ": x " << ShapeString(x.shape()) << " gives "
      << ShapeString(expected) << ", got " << ShapeString(y.shape());
  if (bias.defined()) {
    TRELLIS_CHECK(bias.ndim() == 1 && bias.dim(0) == d.M)
        << kernel << ": bias " << ShapeString(bias.shape()) << ", " << d.M
        << " outputs";
  }
  return d;
}

// The dtype rules of cuda_kernels.h for a GEMM of operands a and b into
// `result`: a and b share a dtype; the result is float32, or bfloat16 when
// the operands are.
void CheckGemmTypes(const char* kernel, const Tensor& a, const Tensor& b,
                    const Tensor& result) {
  ElemOf(kernel, a);
  ElemOf(kernel, result);
  RequireDType(kernel, a.dtype(), {&b});
  TRELLIS_CHECK(result.dtype() == DType::kF32 || a.dtype() == DType::kBF16)
      << kernel << ": a " << DTypeName(result.dtype()) << " result of "
      << DTypeName(a.dtype()) << " operands";
}

// A tensor that goes with a dense layer's output `out` (GELU's input, the
// residual): of out's dtype and shape.
void CheckLikeOutput(const char* kernel, const char* name, const Tensor& t,
                     const Tensor& out) {
  RequireDType(kernel, out.dtype(), {&t});
  TRELLIS_CHECK(t.shape() == out.shape())
      << kernel << ": " << name << " " << ShapeString(t.shape()) << ", out "
      << ShapeString(out.shape());
}

// The GEMM of out = x @ w, with the bias (when defined) in its epilogue.
Gemm ForwardGemm(const char* kernel, const Tensor& x, const Tensor& w,
                 const Tensor& bias, Tensor& out, const Dims& d,
                 WeightLayout layout) {
  Gemm g;
  g.m = d.M;
  g.n = d.N;
  g.k = d.K;
  g.trans_a = layout == WeightLayout::kOutIn;
  g.a = w.raw();
  g.lda = layout == WeightLayout::kInOut ? d.M : d.K;
  g.b = x.raw();
  g.ldb = d.K;
  g.d = out.raw();
  g.ldd = d.M;
  g.ab_type = CudaType(kernel, w);
  g.d_type = CudaType(kernel, out);
  if (bias.defined()) {
    RequireDType(kernel, out.dtype(), {&bias});
    g.bias = bias.raw();
    g.bias_type = g.d_type;
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  return g;
}

// Stream-ordered float32 device memory on ComputeStream(), freed (in
// stream order) at scope end.
class FloatScratch {
 public:
  explicit FloatScratch(int64_t count) {
    TRELLIS_CUDA_CHECK(cudaMallocAsync(
        &data_, sizeof(float) * static_cast<size_t>(count), ComputeStream()));
  }
  ~FloatScratch() { TRELLIS_CUDA_CHECK(cudaFreeAsync(data_, ComputeStream())); }
  FloatScratch(const FloatScratch&) = delete;
  FloatScratch& operator=(const FloatScratch&) = delete;
  float* get() const { return static_cast<float*>(data_); }

 private:
  void* data_ = nullptr;
};

// The GEMM of dx (N, K) = dout (N, M) @ op(w)^T, beta 0 or 1: column-major
// dx^T (K, N) = op(W) (K, M) · dout^T (M, N).
Gemm InputGradGemm(const char* kernel, const Tensor& dout, const Tensor& w,
                   Tensor& dx, const Dims& d, WeightLayout layout,
                   GradWrite write) {
  Gemm g;
  g.m = d.K;
  g.n = d.N;
  g.k = d.M;
  g.trans_a = layout == WeightLayout::kInOut;
  g.a = w.raw();
  g.lda = layout == WeightLayout::kInOut ? d.M : d.K;
  g.b = dout.raw();
  g.ldb = d.M;
  g.d = dx.raw();
  g.ldd = d.K;
  g.ab_type = CudaType(kernel, w);
  g.d_type = CudaType(kernel, dx);
  g.beta = write == GradWrite::kAccumulate ? 1.f : 0.f;
  return g;
}

// Whether a (rows, ld) aux matrix at `aux` meets the GELU epilogues' limits
// (leading dimension a multiple of 8, 16-byte alignment).
bool GeluAuxFits(const void* aux, int64_t ld, DType dtype) {
  return ld % 8 == 0 && Alignment(aux, ld, DTypeSize(dtype)) >= 16;
}

// out = bias rows (or zeros) when K == 0.
void EmptyProduct(const Tensor& bias, Tensor& out, const Dims& d) {
  TRELLIS_CUDA_CHECK(
      cudaMemsetAsync(out.raw(), 0, out.nbytes(), ComputeStream()));
  CountLaunches(1);
  if (bias.defined()) {
    cuda_launch::AddBias(ElemOf("MatmulForward", out), bias.raw(), out.raw(),
                         d.N, d.M);
  }
}

}  // namespace

void MatmulForward(const Tensor& x, const Tensor& w, const Tensor& bias,
                   Tensor& out, WeightLayout layout) {
  const char* kernel = "MatmulForward";
  const int device = CommonDevice(kernel, {&x, &w, &bias, &out});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, w, out, bias, layout);
  CheckGemmTypes(kernel, x, w, out);
  if (d.K == 0) return EmptyProduct(bias, out, d);
  RunGemm(device, ForwardGemm(kernel, x, w, bias, out, d, layout));
}

void MatmulForwardResidual(const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, Tensor& out,
                           WeightLayout layout) {
  const char* kernel = "MatmulForwardResidual";
  const int device = CommonDevice(kernel, {&x, &w, &bias, &residual, &out});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, w, out, bias, layout);
  CheckGemmTypes(kernel, x, w, out);
  CheckLikeOutput(kernel, "residual", residual, out);
  TRELLIS_CHECK(out.numel() == 0 || out.raw() != residual.raw())
      << kernel << ": out would overwrite the residual";
  if (d.K == 0) {
    EmptyProduct(bias, out, d);
    cuda::Add(out, residual, out);
    return;
  }
  Gemm g = ForwardGemm(kernel, x, w, bias, out, d, layout);
  g.c = residual.raw();
  g.beta = 1.f;
  RunGemm(device, g);
}

void MatmulForwardGelu(const Tensor& x, const Tensor& w, const Tensor& bias,
                       Tensor& pre_gelu, Tensor& out, WeightLayout layout) {
  const char* kernel = "MatmulForwardGelu";
  const int device = CommonDevice(kernel, {&x, &w, &bias, &pre_gelu, &out});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, w, out, bias, layout);
  CheckGemmTypes(kernel, x, w, out);
  CheckLikeOutput(kernel, "pre_gelu", pre_gelu, out);
  const uint32_t aux_align =
      Alignment(pre_gelu.raw(), d.M, DTypeSize(out.dtype()));
  if (d.K == 0 || d.M % 8 != 0 || aux_align < 16) {
    // Outside the epilogue's limits (aux leading dimension a multiple of 8,
    // 16-byte alignment): the plain GEMM, then the GELU kernel.
    cuda::MatmulForward(x, w, bias, pre_gelu, layout);
    cuda::GeluForward(pre_gelu, out);
    return;
  }
  Gemm g = ForwardGemm(kernel, x, w, bias, out, d, layout);
  g.epilogue = bias.defined() ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                              : CUBLASLT_EPILOGUE_GELU_AUX;
  g.aux = pre_gelu.raw();
  if (d.N == 0 || d.M == 0 || TryLtGemm(device, g)) return;
  ReportFallback(device, g);
  cuda::MatmulForward(x, w, bias, pre_gelu, layout);
  cuda::GeluForward(pre_gelu, out);
}

void MatmulBackwardInput(const Tensor& dout, const Tensor& w, Tensor& dx,
                         WeightLayout layout, GradWrite write) {
  const char* kernel = "MatmulBackwardInput";
  const int device = CommonDevice(kernel, {&dout, &w, &dx});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, dx, w, dout, Tensor(), layout);
  CheckGemmTypes(kernel, dout, w, dx);
  if (d.M == 0) {
    // An empty product: dx keeps its content, or becomes zero.
    if (write == GradWrite::kWrite && dx.nbytes() > 0) {
      TRELLIS_CUDA_CHECK(
          cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), ComputeStream()));
      CountLaunches(1);
    }
    return;
  }
  RunGemm(device, InputGradGemm(kernel, dout, w, dx, d, layout, write));
}

void MatmulBackwardInputGelu(const Tensor& dout, const Tensor& w,
                             const Tensor& pre_gelu, Tensor& dpre,
                             WeightLayout layout) {
  const char* kernel = "MatmulBackwardInputGelu";
  const int device = CommonDevice(kernel, {&dout, &w, &pre_gelu, &dpre});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, dpre, w, dout, Tensor(), layout);
  CheckGemmTypes(kernel, dout, w, dpre);
  RequireDType(kernel, dpre.dtype(), {&pre_gelu});
  TRELLIS_CHECK(pre_gelu.shape() == dpre.shape())
      << kernel << ": pre_gelu " << ShapeString(pre_gelu.shape()) << ", dpre "
      << ShapeString(dpre.shape());
  TRELLIS_CHECK(dpre.numel() == 0 || dpre.raw() != pre_gelu.raw())
      << kernel << ": dpre would overwrite pre_gelu";
  Gemm g = InputGradGemm(kernel, dout, w, dpre, d, layout, GradWrite::kWrite);
  if (d.M > 0 && d.N > 0 && d.K > 0 &&
      GeluAuxFits(pre_gelu.raw(), d.K, dpre.dtype())) {
    g.epilogue = CUBLASLT_EPILOGUE_DGELU;
    g.aux = const_cast<void*>(pre_gelu.raw());
    if (TryLtGemm(device, g)) return;
    ReportFallback(device, g);
  }
  // The GEMM, then GELU's derivative in place.
  cuda::MatmulBackwardInput(dout, w, dpre, layout, GradWrite::kWrite);
  cuda::GeluBackwardWrite(pre_gelu, dpre, dpre);
}

void MatmulBackwardWeight(const Tensor& dout, const Tensor& x, Tensor& dw,
                          Tensor& dbias, WeightLayout layout) {
  const char* kernel = "MatmulBackwardWeight";
  const int device = CommonDevice(kernel, {&dout, &x, &dw, &dbias});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, dw, dout, dbias, layout);
  CheckGemmTypes(kernel, dout, x, dw);
  const cuda_launch::Elem dout_elem = ElemOf(kernel, dout);
  if (dbias.defined()) ElemOf(kernel, dbias);
  if (d.N == 0) return;
  Gemm g;
  g.k = d.N;
  if (layout == WeightLayout::kInOut) {
    // dw^T (M, K) += dout^T (M, N) · x (N, K); dbias from A's rows.
    g.m = d.M;
    g.n = d.K;
    g.a = dout.raw();
    g.lda = d.M;
    g.b = x.raw();
    g.ldb = d.K;
    g.ldd = d.M;
  } else {
    // dw^T (K, M) += x^T (K, N) · dout (N, M); dbias from B's columns.
    g.m = d.K;
    g.n = d.M;
    g.a = x.raw();
    g.lda = d.K;
    g.b = dout.raw();
    g.ldb = d.M;
    g.ldd = d.K;
  }
  g.trans_b = true;
  g.d = dw.raw();
  g.ab_type = CudaType(kernel, x);
  g.d_type = CudaType(kernel, dw);
  g.beta = 1.f;
  if (!dbias.defined() || d.M == 0) return RunGemm(device, g);
  if (d.K > 0) {
    // The epilogue writes the bias gradient; it is added to dbias after.
    FloatScratch bias_grad(d.M);
    Gemm fused = g;
    fused.epilogue = layout == WeightLayout::kInOut ? CUBLASLT_EPILOGUE_BGRADA
                                                    : CUBLASLT_EPILOGUE_BGRADB;
    fused.bias = bias_grad.get();
    fused.bias_type = CUDA_R_32F;
    if (TryLtGemm(device, fused)) {
      cuda_launch::AccumulateFloat(bias_grad.get(), ElemOf(kernel, dbias),
                                   dbias.raw(), d.M);
      return;
    }
    ReportFallback(device, fused);
  }
  cuda_launch::ColumnSums(dout_elem, dout.raw(), d.N, d.M,
                          ElemOf(kernel, dbias), dbias.raw());
  if (d.K > 0) RunGemm(device, g);
}

}  // namespace cuda
}  // namespace trellis
