// Dense layers on CUDA through cuBLASLt (cuda_kernels.h).
//
// Row-major (N, M) = (N, K) @ (K, M) is computed as the column-major
// product out^T (M, N) = W^T (M, K) · x^T (K, N): a row-major matrix is its
// transpose in column-major terms, so no data moves. Bias (and GELU) ride in
// the GEMM's epilogue; backward GEMMs use beta = 1, which is what makes them
// accumulate. Compute is float32 (CUBLAS_COMPUTE_32F, no TF32), for float32
// or bfloat16 operands.
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
// Each thread keeps, per device, a cuBLASLt handle, a cuBLAS handle, a
// 32 MiB workspace and, per problem (shape, strides, dtypes, transposes,
// epilogue, beta and the alignments), the matmul descriptor, the three
// matrix layouts and the algorithm the heuristic chose (asked once). Only
// the bias and aux pointers are set again per call. They live until the
// process exits.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"
#include "framework/launch_count.h"

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
  // (m) for the bias epilogues, (m) for BGRADA, (n) for BGRADB; written by
  // the gradient epilogues.
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;  // set with `bias`
  void* aux = nullptr;  // GELU input (m, n), of d_type, ld = ldd
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

// Everything cuBLASLt needs for one problem but its pointers.
struct LtPlan {
  Desc desc;
  Layout a, b, d;
  std::optional<cublasLtMatmulAlgo_t> algo;  // nullopt: the heuristic had none
};

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  cublasHandle_t fallback = nullptr;  // cublasGemmEx when cuBLASLt has none
  void* workspace = nullptr;
  std::map<AlgoKey, std::unique_ptr<LtPlan>> plans;
  // Epilogues whose fallback has been reported.
  std::set<int> reported;
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
    SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            static_cast<int32_t>(g.bias_type));
  }
  if (g.aux != nullptr) {
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldd);
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
            static_cast<int32_t>(g.d_type));
  }
  return owned;
}

// Points `desc` at this call's bias and aux buffers.
void SetPointers(cublasLtMatmulDesc_t desc, const Gemm& g) {
  if (g.bias != nullptr) {
    SetDesc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  }
  if (g.aux != nullptr) {
    SetDesc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
  }
}

// The plan for `g`'s problem (shape, types, epilogue, beta and the
// alignments its algorithm was chosen for), made and asked of the heuristic
// on first use.
const LtPlan& PlanFor(LtContext& context, const Gemm& g) {
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
      g.d_type | (g.bias != nullptr ? g.bias_type << 16 : 0),
      static_cast<int>(g.epilogue) | (g.beta != 0.f ? 1 << 20 : 0),
      align_a,
      align_b,
      align_d,
      align_extra};
  std::unique_ptr<LtPlan>& slot = context.plans[key];
  if (slot != nullptr) return *slot;
  auto plan = std::make_unique<LtPlan>();
  plan->desc = MakeDesc(g);
  plan->a = MakeLayout(g.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k,
                       g.lda);
  plan->b = MakeLayout(g.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n,
                       g.ldb);
  plan->d = MakeLayout(g.d_type, g.m, g.n, g.ldd);
  SetPointers(plan->desc.get(), g);
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
      context.handle, plan->desc.get(), plan->a.get(), plan->b.get(),
      plan->d.get(), plan->d.get(), raw, 1, &result, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    count = 0;
  else
    TRELLIS_CUBLAS_CHECK(status);
  if (count > 0) plan->algo = result.algo;
  slot = std::move(plan);
  return *slot;
}

// Runs `g` through cuBLASLt; false (nothing run) when cuBLASLt has no
// algorithm for it.
bool TryLtGemm(int device, const Gemm& g) {
  LtContext& context = ContextFor(device);
  const LtPlan& plan = PlanFor(context, g);
  if (!plan.algo.has_value()) return false;
  SetPointers(plan.desc.get(), g);
  const float alpha = 1.f;
  TRELLIS_CUBLAS_CHECK(cublasLtMatmul(
      context.handle, plan.desc.get(), &alpha, g.a, plan.a.get(), g.b,
      plan.b.get(), &g.beta, g.d, plan.d.get(), g.d, plan.d.get(), &*plan.algo,
      context.workspace, kWorkspaceBytes, ComputeStream()));
  CountLaunches(1);
  return true;
}

// Prints, once per epilogue kind (per thread and device), that a fused
// epilogue fell back to separate passes.
void ReportFallback(int device, const Gemm& g) {
  LtContext& context = ContextFor(device);
  const int kind = static_cast<int>(g.epilogue);
  if (!context.reported.insert(kind).second) return;
  std::fprintf(stderr,
               "trellis: cuBLASLt has no algorithm for epilogue %d on a %lld "
               "x %lld x %lld GEMM (device %d); running the GEMM and its "
               "epilogue as separate passes (reported once per epilogue)\n",
               kind, static_cast<long long>(g.m), static_cast<long long>(g.n),
               static_cast<long long>(g.k), device);
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
  CountLaunches(1);
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
