// Dense layers on CUDA through cuBLASLt (cuda_kernels.h).
//
// Row-major (N, M) = (N, K) @ (K, M) is computed as the column-major
// product out^T (M, N) = W^T (M, K) · x^T (K, N): a row-major matrix is its
// transpose in column-major terms, so no data moves. Bias (and GELU) ride in
// the GEMM's epilogue; backward GEMMs use beta = 1, which is what makes them
// accumulate. Compute is float32 (CUBLAS_COMPUTE_32F, no TF32), for float32
// or bfloat16 operands.
//
// When cuBLASLt's heuristic offers no algorithm (unusual alignments), the
// GEMM runs through cublasGemmEx, with the bias added by a kernel and GELU
// by GeluForward.
//
// Each thread keeps, per device, a cuBLASLt handle, a cuBLAS handle, a
// 32 MiB workspace and the algorithm chosen for each problem (asked of the
// heuristic once). They live until the process exits.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"

#define TRELLIS_CUBLAS_CHECK(call)                          \
  do {                                                      \
    const cublasStatus_t _trellis_cublas_status = (call);   \
    if (_trellis_cublas_status != CUBLAS_STATUS_SUCCESS) {  \
      ::trellis::internal::DeviceCallFailure(               \
          "cuBLAS", #call, __FILE__, __LINE__,              \
          cublasLtGetStatusString(_trellis_cublas_status)); \
    }                                                       \
  } while (0)

namespace trellis {
namespace cuda {
namespace {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// One column-major GEMM: D (m, n) = op(A) (m, k) · op(B) (k, n) + beta · D,
// then the epilogue.
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  float beta = 0.f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m), of d_type
  void* aux = nullptr;         // GELU input (m, n), of d_type, ld = ldd
};

// The alignment cuBLASLt may assume for a matrix: that of its pointer and of
// its column stride, at most 256 bytes.
uint32_t Alignment(const void* pointer, int64_t ld, size_t elem_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(pointer) |
                        static_cast<uint64_t>(ld) * elem_bytes | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

size_t ElemBytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

using AlgoKey =
    std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int, int, int, uint32_t, uint32_t, uint32_t, uint32_t>;

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  cublasHandle_t fallback = nullptr;  // cublasGemmEx when cuBLASLt has none
  void* workspace = nullptr;
  // The heuristic's answer per problem; nullopt when it had none.
  std::map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

LtContext& ContextFor(int device) {
  thread_local std::vector<std::unique_ptr<LtContext>> contexts;
  if (contexts.size() <= static_cast<size_t>(device)) {
    contexts.resize(device + 1);
  }
  std::unique_ptr<LtContext>& context = contexts[device];
  if (context == nullptr) {
    context = std::make_unique<LtContext>();
    TRELLIS_CUBLAS_CHECK(cublasLtCreate(&context->handle));
    TRELLIS_CUBLAS_CHECK(cublasCreate(&context->fallback));
    TRELLIS_CUBLAS_CHECK(cublasSetStream(context->fallback, ComputeStream()));
    TRELLIS_CUDA_CHECK(cudaMalloc(&context->workspace, kWorkspaceBytes));
  }
  return *context;
}

template <typename T, typename Deleter>
using Owned = std::unique_ptr<std::remove_pointer_t<T>, Deleter>;

struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t p) const {
    cublasLtMatmulDescDestroy(p);
  }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t p) const {
    cublasLtMatrixLayoutDestroy(p);
  }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const {
    cublasLtMatmulPreferenceDestroy(p);
  }
};
using Desc = Owned<cublasLtMatmulDesc_t, DescDeleter>;
using Layout = Owned<cublasLtMatrixLayout_t, LayoutDeleter>;

Layout MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  TRELLIS_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                 static_cast<uint64_t>(cols), ld));
  return Layout(layout);
}

template <typename V>
void SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
             const V& value) {
  TRELLIS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

Desc MakeDesc(const Gemm& g) {
  cublasLtMatmulDesc_t desc = nullptr;
  TRELLIS_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  Desc owned(desc);
  const int32_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
          static_cast<uint32_t>(g.epilogue));
  if (g.bias != nullptr) {
    SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            static_cast<int32_t>(g.d_type));
  }
  if (g.aux != nullptr) {
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldd);
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
            static_cast<int32_t>(g.d_type));
  }
  return owned;
}

// The heuristic's first algorithm for `g`, remembered per problem (shape,
// types, epilogue and the alignments it was chosen for); null when it has
// none.
const cublasLtMatmulAlgo_t* ChooseAlgo(LtContext& context, const Gemm& g,
                                       cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t a,
                                       cublasLtMatrixLayout_t b,
                                       cublasLtMatrixLayout_t d) {
  const uint32_t align_a = Alignment(g.a, g.lda, ElemBytes(g.ab_type));
  const uint32_t align_b = Alignment(g.b, g.ldb, ElemBytes(g.ab_type));
  const uint32_t align_d = Alignment(g.d, g.ldd, ElemBytes(g.d_type));
  // The heuristic reads the bias and aux pointers for their alignment.
  const uint32_t align_extra =
      std::min(Alignment(g.bias, 0, 1), Alignment(g.aux, 0, 1));
  const AlgoKey key{
      g.trans_a,
      g.trans_b,
      g.m,
      g.n,
      g.k,
      g.lda,
      g.ldb,
      g.ldd,
      g.ab_type,
      g.d_type,
      static_cast<int>(g.epilogue) | (g.beta != 0.f ? 1 << 20 : 0),
      align_a,
      align_b,
      align_d,
      align_extra};
  auto found = context.algos.find(key);
  if (found != context.algos.end()) {
    return found->second.has_value() ? &*found->second : nullptr;
  }
  cublasLtMatmulPreference_t raw = nullptr;
  TRELLIS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
  Owned<cublasLtMatmulPreference_t, PreferenceDeleter> preference(raw);
  const uint64_t workspace = kWorkspaceBytes;
  TRELLIS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
      sizeof(workspace)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& [attr, value] : aligns) {
    TRELLIS_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(raw, attr, &value, sizeof(value)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      context.handle, desc, a, b, d, d, raw, 1, &result, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    count = 0;
  else
    TRELLIS_CUBLAS_CHECK(status);
  auto& slot = context.algos[key];
  if (count > 0) slot = result.algo;
  return slot.has_value() ? &*slot : nullptr;
}

// Runs `g` through cuBLASLt; false (nothing run) when cuBLASLt has no
// algorithm for it.
bool TryLtGemm(int device, const Gemm& g) {
  LtContext& context = ContextFor(device);
  const Desc desc = MakeDesc(g);
  const Layout a = MakeLayout(g.ab_type, g.trans_a ? g.k : g.m,
                              g.trans_a ? g.m : g.k, g.lda);
  const Layout b = MakeLayout(g.ab_type, g.trans_b ? g.n : g.k,
                              g.trans_b ? g.k : g.n, g.ldb);
  const Layout d = MakeLayout(g.d_type, g.m, g.n, g.ldd);
  const cublasLtMatmulAlgo_t* algo =
      ChooseAlgo(context, g, desc.get(), a.get(), b.get(), d.get());
  if (algo == nullptr) return false;
  const float alpha = 1.f;
  TRELLIS_CUBLAS_CHECK(
      cublasLtMatmul(context.handle, desc.get(), &alpha, g.a, a.get(), g.b,
                     b.get(), &g.beta, g.d, d.get(), g.d, d.get(), algo,
                     context.workspace, kWorkspaceBytes, ComputeStream()));
  return true;
}

// `g` without its epilogue through cublasGemmEx (any alignment).
void FallbackGemm(int device, const Gemm& g) {
  constexpr int64_t kMax = 0x7fffffff;
  TRELLIS_CHECK(g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax &&
                g.ldb <= kMax && g.ldd <= kMax)
      << "GEMM of " << g.m << " x " << g.n << " x " << g.k
      << " exceeds cuBLAS's int sizes ";
  const float alpha = 1.f;
  TRELLIS_CUBLAS_CHECK(cublasGemmEx(
      ContextFor(device).fallback, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m),
      static_cast<int>(g.n), static_cast<int>(g.k), &alpha, g.a, g.ab_type,
      static_cast<int>(g.lda), g.b, g.ab_type, static_cast<int>(g.ldb), &g.beta,
      g.d, g.d_type, static_cast<int>(g.ldd), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

// Runs `g` (epilogue none or bias): cuBLASLt when it has an algorithm, else
// cublasGemmEx and the bias kernel.
void RunGemm(int device, const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  TRELLIS_CHECK_GT(g.k, 0) << "empty inner dimension reaches the GEMM ";
  if (TryLtGemm(device, g)) return;
  TRELLIS_CHECK(g.epilogue == CUBLASLT_EPILOGUE_DEFAULT ||
                g.epilogue == CUBLASLT_EPILOGUE_BIAS)
      << "no fallback for cuBLASLt epilogue " << g.epilogue;
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
  const Dims d{cuda_internal::Rows(x), x.dim(-1), in_out ? w.dim(1) : w.dim(0)};
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
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  return g;
}

// out = bias rows (or zeros) when K == 0.
void EmptyProduct(const Tensor& bias, Tensor& out, const Dims& d) {
  TRELLIS_CUDA_CHECK(
      cudaMemsetAsync(out.raw(), 0, out.nbytes(), ComputeStream()));
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

void MatmulForwardGelu(const Tensor& x, const Tensor& w, const Tensor& bias,
                       Tensor& pre_gelu, Tensor& out, WeightLayout layout) {
  const char* kernel = "MatmulForwardGelu";
  const int device = CommonDevice(kernel, {&x, &w, &bias, &pre_gelu, &out});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, w, out, bias, layout);
  CheckGemmTypes(kernel, x, w, out);
  RequireDType(kernel, out.dtype(), {&pre_gelu});
  TRELLIS_CHECK(pre_gelu.shape() == out.shape())
      << kernel << ": pre_gelu " << ShapeString(pre_gelu.shape()) << ", out "
      << ShapeString(out.shape());
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
  cuda::MatmulForward(x, w, bias, pre_gelu, layout);
  cuda::GeluForward(pre_gelu, out);
}

void MatmulBackwardInput(const Tensor& dout, const Tensor& w, Tensor& dx,
                         WeightLayout layout) {
  const char* kernel = "MatmulBackwardInput";
  const int device = CommonDevice(kernel, {&dout, &w, &dx});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, dx, w, dout, Tensor(), layout);
  CheckGemmTypes(kernel, dout, w, dx);
  if (d.M == 0) return;
  // dx^T (K, N) += op(W) (K, M) · dout^T (M, N).
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
  g.beta = 1.f;
  RunGemm(device, g);
}

void MatmulBackwardWeight(const Tensor& dout, const Tensor& x, Tensor& dw,
                          Tensor& dbias, WeightLayout layout) {
  const char* kernel = "MatmulBackwardWeight";
  const int device = CommonDevice(kernel, {&dout, &x, &dw, &dbias});
  CudaDeviceGuard guard(device);
  const Dims d = CheckDense(kernel, x, dw, dout, dbias, layout);
  CheckGemmTypes(kernel, dout, x, dw);
  if (dbias.defined()) ElemOf(kernel, dbias);
  if (dbias.defined()) {
    cuda_launch::ColumnSums(ElemOf(kernel, dout), dout.raw(), d.N, d.M,
                            ElemOf(kernel, dbias), dbias.raw());
  }
  if (d.N == 0) return;
  Gemm g;
  g.k = d.N;
  if (layout == WeightLayout::kInOut) {
    // dw^T (M, K) += dout^T (M, N) · x (N, K).
    g.m = d.M;
    g.n = d.K;
    g.a = dout.raw();
    g.lda = d.M;
    g.b = x.raw();
    g.ldb = d.K;
    g.ldd = d.M;
  } else {
    // dw^T (K, M) += x^T (K, N) · dout (N, M).
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
  RunGemm(device, g);
}

}  // namespace cuda
}  // namespace trellis
