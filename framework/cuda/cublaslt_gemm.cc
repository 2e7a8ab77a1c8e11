#include "framework/cuda/cublaslt_gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/gemm_tuning.h"
#include "framework/launch_count.h"
#include "framework/status.h"

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
namespace cublaslt {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// With --gemm_autotune: the heuristic's candidates timed per problem, and
// the timed calls of each after one untimed.
constexpr int kTuneCandidates = 8;
constexpr int kTimedRuns = 3;

size_t ElemBytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

using AlgoKey =
    std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;

// The matrix C is read from: `c`, else D.
const void* CPointer(const Gemm& g) { return g.c != nullptr ? g.c : g.d; }

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
  // With autotuning, the heuristic's candidates (algo is the first) until
  // the problem's first call has timed them; then empty.
  std::vector<cublasLtMatmulAlgo_t> candidates;
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
LtPlan& PlanFor(LtContext& context, const Gemm& g) {
  const uint32_t align_a = Alignment(g.a, g.lda, ElemBytes(g.ab_type));
  const uint32_t align_b = Alignment(g.b, g.ldb, ElemBytes(g.ab_type));
  const uint32_t align_d = Alignment(g.d, g.ldd, ElemBytes(g.d_type));
  const uint32_t align_c = Alignment(CPointer(g), g.ldd, ElemBytes(g.d_type));
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
      align_c,
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
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& [attr, value] : aligns) {
    TRELLIS_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(raw, attr, &value, sizeof(value)));
  }
  const int wanted = GemmAutotune() ? kTuneCandidates : 1;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
  int count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      context.handle, plan->desc.get(), plan->a.get(), plan->b.get(),
      plan->d.get(), plan->d.get(), raw, wanted, results, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    count = 0;
  else
    TRELLIS_CUBLAS_CHECK(status);
  for (int i = 0; i < count; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (!plan->algo.has_value()) plan->algo = results[i].algo;
    if (wanted > 1) plan->candidates.push_back(results[i].algo);
  }
  if (plan->candidates.size() < 2) plan->candidates.clear();
  slot = std::move(plan);
  return *slot;
}

// One call of `g` with `algo`, D written to `d` (C read as the call reads
// it).
cublasStatus_t RunAlgo(LtContext& context, const LtPlan& plan, const Gemm& g,
                       const cublasLtMatmulAlgo_t& algo, void* d) {
  const float alpha = 1.f;
  return cublasLtMatmul(context.handle, plan.desc.get(), &alpha, g.a,
                        plan.a.get(), g.b, plan.b.get(), &g.beta, CPointer(g),
                        plan.d.get(), d, plan.d.get(), &algo, context.workspace,
                        kWorkspaceBytes, ComputeStream());
}

// Milliseconds of one call of `g` with `algo` (one untimed call, then the
// mean of kTimedRuns), writing D into `scratch`; negative when cuBLASLt
// refuses the algorithm.
float TimeAlgo(LtContext& context, const LtPlan& plan, const Gemm& g,
               const cublasLtMatmulAlgo_t& algo, void* scratch,
               cudaEvent_t start, cudaEvent_t stop) {
  if (RunAlgo(context, plan, g, algo, scratch) != CUBLAS_STATUS_SUCCESS) {
    return -1.f;
  }
  TRELLIS_CUDA_CHECK(cudaEventRecord(start, ComputeStream()));
  for (int i = 0; i < kTimedRuns; ++i) {
    if (RunAlgo(context, plan, g, algo, scratch) != CUBLAS_STATUS_SUCCESS) {
      return -1.f;
    }
  }
  TRELLIS_CUDA_CHECK(cudaEventRecord(stop, ComputeStream()));
  TRELLIS_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  TRELLIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CountLaunches(kTimedRuns + 1);
  return ms / kTimedRuns;
}

// Times the plan's candidates on `g`'s inputs, D into stream-ordered
// scratch (so that `g`'s own output, which beta may accumulate into, is
// untouched; the aux and bias-gradient outputs are written with the values
// the real call writes), and keeps the fastest. Without memory for the
// scratch the heuristic's first stays.
void TuneAlgo(LtContext& context, LtPlan& plan, const Gemm& g) {
  std::vector<cublasLtMatmulAlgo_t> candidates;
  candidates.swap(plan.candidates);
  const size_t bytes = static_cast<size_t>(g.ldd) * static_cast<size_t>(g.n) *
                       ElemBytes(g.d_type);
  void* scratch = nullptr;
  if (cudaMallocAsync(&scratch, bytes, ComputeStream()) != cudaSuccess) {
    cudaGetLastError();  // clears the failed allocation's error
    return;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  TRELLIS_CUDA_CHECK(cudaEventCreate(&start));
  TRELLIS_CUDA_CHECK(cudaEventCreate(&stop));
  float first = -1.f, best = -1.f;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const float ms =
        TimeAlgo(context, plan, g, candidates[i], scratch, start, stop);
    if (i == 0) first = ms;
    if (ms >= 0.f && (best < 0.f || ms < best)) {
      best = ms;
      plan.algo = candidates[i];
    }
  }
  TRELLIS_CUDA_CHECK(cudaEventDestroy(start));
  TRELLIS_CUDA_CHECK(cudaEventDestroy(stop));
  TRELLIS_CUDA_CHECK(cudaFreeAsync(scratch, ComputeStream()));
  if (first >= 0.f && best >= 0.f) {
    RecordGemmTuning(first, best, best < first);
  }
}

}  // namespace

uint32_t Alignment(const void* pointer, int64_t ld, size_t elem_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(pointer) |
                        static_cast<uint64_t>(ld) * elem_bytes | 256;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// Runs `g` through cuBLASLt; false (nothing run) when cuBLASLt has no
// algorithm for it.
bool TryLtGemm(int device, const Gemm& g) {
  LtContext& context = ContextFor(device);
  LtPlan& plan = PlanFor(context, g);
  if (!plan.algo.has_value()) return false;
  if (!plan.candidates.empty()) TuneAlgo(context, plan, g);
  SetPointers(plan.desc.get(), g);
  const float alpha = 1.f;
  TRELLIS_CUBLAS_CHECK(cublasLtMatmul(
      context.handle, plan.desc.get(), &alpha, g.a, plan.a.get(), g.b,
      plan.b.get(), &g.beta, CPointer(g), plan.d.get(), g.d, plan.d.get(),
      &*plan.algo, context.workspace, kWorkspaceBytes, ComputeStream()));
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

// `g` without its epilogue through cublasGemmEx (any alignment); a C apart
// from D is first copied into D.
void FallbackGemm(int device, const Gemm& g) {
  constexpr int64_t kMax = 0x7fffffff;
  TRELLIS_CHECK(g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax &&
                g.ldb <= kMax && g.ldd <= kMax)
      << "GEMM of " << g.m << " x " << g.n << " x " << g.k
      << " exceeds cuBLAS's int sizes ";
  if (g.c != nullptr && g.c != g.d && g.beta != 0.f) {
    const size_t elem = ElemBytes(g.d_type);
    TRELLIS_CUDA_CHECK(
        cudaMemcpy2DAsync(g.d, g.ldd * elem, g.c, g.ldd * elem, g.m * elem, g.n,
                          cudaMemcpyDeviceToDevice, ComputeStream()));
    CountLaunches(1);
  }
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

}  // namespace cublaslt
}  // namespace cuda
}  // namespace trellis
