#include "framework/cuda/attention_cudnn.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "framework/cuda/attention_cudnn_graph.h"
#include "framework/cuda/attention_cudnn_layout.h"
#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cudnn_backend.h"
#include "framework/launch_count.h"
#include "framework/status.h"
#include "framework/tensor.h"

namespace trellis {
namespace cuda_internal {
namespace {

using cuda_launch::AttentionDims;
using cuda_launch::Elem;
using cudnn_internal::BackendDescriptor;
namespace ca = cudnn_attention;

constexpr int64_t kBf16Bytes = 2;
constexpr size_t kAlign = 256;  // workspace pieces start on this boundary

struct PlanKey {
  bool backward;
  Elem t;
  int64_t B, T, H, D, Hkv;
  bool operator<(const PlanKey& o) const {
    return std::tie(backward, t, B, T, H, D, Hkv) <
           std::tie(o.backward, o.t, o.B, o.T, o.H, o.D, o.Hkv);
  }
};

// An execution plan with what it was built from, kept alive beside it.
struct Plan {
  ca::Graph graph;
  BackendDescriptor config, plan;
  int64_t workspace_bytes = 0;
};

// One thread's cuDNN state on one device.
struct Context {
  cudnnHandle_t handle = nullptr;
  absl::Status handle_status;
  int compute_major = 0, compute_minor = 0;
  std::map<PlanKey, absl::StatusOr<std::unique_ptr<Plan>>> plans;
  int64_t plan_builds = 0;
};

int CurrentDevice() {
  int device = 0;
  TRELLIS_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

Context& ContextFor(int device) {
  thread_local std::vector<std::unique_ptr<Context>> contexts;
  if (contexts.size() <= static_cast<size_t>(device)) {
    contexts.resize(device + 1);
  }
  std::unique_ptr<Context>& context = contexts[device];
  if (context == nullptr) {
    context = std::make_unique<Context>();
    TRELLIS_CUDA_CHECK(cudaDeviceGetAttribute(
        &context->compute_major, cudaDevAttrComputeCapabilityMajor, device));
    TRELLIS_CUDA_CHECK(cudaDeviceGetAttribute(
        &context->compute_minor, cudaDevAttrComputeCapabilityMinor, device));
    context->handle_status =
        TRELLIS_CUDNN_STATUS(cudnnCreate(&context->handle));
    if (context->handle_status.ok()) {
      context->handle_status = TRELLIS_CUDNN_STATUS(
          cudnnSetStream(context->handle, ComputeStream()));
    }
  }
  return *context;
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// cuDNN's version as major.minor.patch (cudnnGetVersion() is
// major·10000 + minor·100 + patch from 9.0 on).
std::string CudnnVersionText() {
  const size_t v = cudnnGetVersion();
  return absl::StrCat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

// Why cuDNN cannot take this call at all (before any graph is built). The
// version and one-token rules are those cuDNN's own frontend enforces for
// its fused attention (its support surface): 9.10.0 and 9.10.1 have known
// bugs there, backward does not take one query against one key, and a
// causal forward of one token needs 9.10 or newer.
absl::Status CheckSupported(const Context& c, Elem t, const AttentionDims& d,
                            bool backward,
                            std::initializer_list<const void*> pointers) {
  TRELLIS_RETURN_IF_ERROR(c.handle_status);
  if (t != Elem::kBF16) {
    return absl::UnavailableError(
        "float32 inputs (cuDNN's fused attention takes float16 and bfloat16 "
        "only)");
  }
  const size_t version = cudnnGetVersion();
  if (version < 90000) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN ", version, " is older than 9.0"));
  }
  if (version == 91000 || version == 91001) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN ", CudnnVersionText(),
                     " has known fused-attention bugs; use 9.10.2 or newer"));
  }
  if (d.T == 1 && backward) {
    return absl::UnavailableError(
        "one token (cuDNN's fused attention backward does not take one query "
        "against one key)");
  }
  if (d.T == 1 && version < 91000) {
    return absl::UnavailableError(
        absl::StrCat("one token under a causal mask (needs cuDNN 9.10 or "
                     "newer; this is ",
                     CudnnVersionText(), ")"));
  }
  if (c.compute_major < 8) {
    return absl::UnavailableError(absl::StrCat(
        "compute capability ", c.compute_major, ".", c.compute_minor,
        " (cuDNN's fused attention needs 8.0 or newer)"));
  }
  if (d.D % 8 != 0 || d.D > 128) {
    return absl::UnavailableError(
        absl::StrCat("head width ", d.D,
                     " (cuDNN's fused attention takes multiples of 8 up to "
                     "128)"));
  }
  bool aligned = (d.D * kBf16Bytes) % 16 == 0;
  for (const void* p : pointers) aligned = aligned && Aligned(p);
  if (!aligned) {
    return absl::UnavailableError(
        "a buffer or head offset not 16-byte aligned");
  }
  return absl::OkStatus();
}

// The engine configs that the heuristics of `mode` offer for `graph`.
absl::StatusOr<std::vector<BackendDescriptor>> EngineConfigs(
    const BackendDescriptor& graph, cudnnBackendHeurMode_t mode) {
  TRELLIS_ASSIGN_OR_RETURN(
      BackendDescriptor heur,
      BackendDescriptor::Create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  TRELLIS_RETURN_IF_ERROR(
      heur.SetDescriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph));
  TRELLIS_RETURN_IF_ERROR(
      heur.Set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  TRELLIS_RETURN_IF_ERROR(heur.Finalize());
  int64_t count = 0;
  TRELLIS_RETURN_IF_ERROR(TRELLIS_CUDNN_STATUS(cudnnBackendGetAttribute(
      heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
      0, &count, nullptr)));
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    TRELLIS_ASSIGN_OR_RETURN(
        BackendDescriptor config,
        BackendDescriptor::Create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(config.get());
    configs.push_back(std::move(config));
  }
  int64_t got = 0;
  TRELLIS_RETURN_IF_ERROR(TRELLIS_CUDNN_STATUS(cudnnBackendGetAttribute(
      heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
      count, &got, raw.data())));
  configs.resize(std::min(got, count));
  return configs;
}

// Asks the heuristics (mode A, then the fallback list) for engine configs and
// keeps the first that finalizes into a plan. A mode whose heuristics fail
// leaves the next mode to try.
absl::StatusOr<std::unique_ptr<Plan>> BuildPlan(cudnnHandle_t handle,
                                                ca::Graph graph) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::move(graph);
  absl::Status last = absl::UnavailableError("the heuristics offered none");
  for (cudnnBackendHeurMode_t mode :
       {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    absl::StatusOr<std::vector<BackendDescriptor>> configs =
        EngineConfigs(plan->graph.graph, mode);
    if (!configs.ok()) {
      last = configs.status();
      continue;
    }
    for (BackendDescriptor& config : *configs) {
      TRELLIS_ASSIGN_OR_RETURN(
          BackendDescriptor exec,
          BackendDescriptor::Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
      TRELLIS_RETURN_IF_ERROR(
          exec.SetHandle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle));
      TRELLIS_RETURN_IF_ERROR(
          exec.SetDescriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config));
      last = exec.Finalize();
      if (!last.ok()) continue;
      int64_t n = 0;
      TRELLIS_RETURN_IF_ERROR(TRELLIS_CUDNN_STATUS(cudnnBackendGetAttribute(
          exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
          CUDNN_TYPE_INT64, 1, &n, &plan->workspace_bytes)));
      plan->config = std::move(config);
      plan->plan = std::move(exec);
      return plan;
    }
  }
  return absl::UnavailableError(absl::StrCat(
      "no cuDNN engine builds a plan for this graph; last: ", last.message()));
}

// The cached plan for `key`, building it on a miss.
absl::StatusOr<const Plan*> PlanFor(Context& c, const PlanKey& key) {
  auto it = c.plans.find(key);
  if (it == c.plans.end()) {
    ++c.plan_builds;
    const ca::GraphShape shape{key.B,  key.T, key.H, key.D, CUDNN_DATA_BFLOAT16,
                               key.Hkv};
    absl::StatusOr<ca::Graph> graph =
        key.backward ? ca::BuildBackwardGraph(c.handle, shape)
                     : ca::BuildForwardGraph(c.handle, shape);
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        graph.ok() ? BuildPlan(c.handle, *std::move(graph))
                   : absl::StatusOr<std::unique_ptr<Plan>>(graph.status());
    it = c.plans.emplace(key, std::move(plan)).first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// At least `bytes` (and kAlign) of device workspace from the run's allocator
// (the memory arena while one is in scope), released when the call returns:
// the arena hands a block out again only to work issued after it on the same
// compute stream, and cudaFree waits for the device.
Tensor Workspace(int device, size_t bytes) {
  const size_t words = (std::max(bytes, kAlign) + 3) / 4;
  return Tensor::Empty({static_cast<int64_t>(words)}, DType::kF32,
                       Device::Cuda(device));
}

// The scalars the graphs take by value.
struct Scalars {
  float scale, mask_value, one = 1.f;
  explicit Scalars(int64_t D)
      : scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))),
        mask_value(cudnnGetVersion() < 91000
                       ? std::numeric_limits<float>::lowest()
                       : -std::numeric_limits<float>::infinity()) {}
};

void Execute(Context& c, const Plan& plan,
             const std::vector<std::pair<int64_t, void*>>& tensors,
             void* workspace) {
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, pointer] : tensors) {
    uids.push_back(uid);
    pointers.push_back(pointer);
  }
  absl::StatusOr<BackendDescriptor> pack =
      BackendDescriptor::Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  TRELLIS_CHECK(pack.ok()) << pack.status().message();
  for (absl::Status s :
       {pack->SetInt64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids),
        pack->Set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                  static_cast<int64_t>(pointers.size()), pointers.data()),
        pack->Set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                  &workspace),
        pack->Finalize()}) {
    TRELLIS_CHECK(s.ok()) << s.message();
  }
  TRELLIS_CUDNN_CHECK(
      cudnnBackendExecute(c.handle, plan.plan.get(), pack->get()));
  CountLaunches(1);  // One plan, whatever kernels cuDNN runs for it.
}

// Where a qkv row's K and V heads start (attention_cudnn_layout.h).
int64_t KeyOffset(const AttentionDims& d) { return d.H * d.D; }
int64_t ValueOffset(const AttentionDims& d) { return (d.H + d.Hkv) * d.D; }

// Byte pointer to element offset `elements` (bfloat16) of p.
void* At(const void* p, int64_t elements) {
  return const_cast<char*>(static_cast<const char*>(p)) + elements * kBf16Bytes;
}

}  // namespace

absl::Status CudnnAttentionForward(Elem t, const AttentionDims& dims,
                                   const void* qkv, void* out, float* lse) {
  const AttentionDims d = cuda_launch::WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return absl::OkStatus();
  const int device = CurrentDevice();
  Context& c = ContextFor(device);
  TRELLIS_RETURN_IF_ERROR(
      CheckSupported(c, t, d, /*backward=*/false, {qkv, out, lse}));
  TRELLIS_ASSIGN_OR_RETURN(const Plan* plan,
                           PlanFor(c, {false, t, d.B, d.T, d.H, d.D, d.Hkv}));
  Scalars s(d.D);
  const Tensor workspace = Workspace(device, plan->workspace_bytes);
  Execute(c, *plan,
          {{ca::kQ, At(qkv, 0)},
           {ca::kKt, At(qkv, KeyOffset(d))},
           {ca::kV, At(qkv, ValueOffset(d))},
           {ca::kO, out},
           {ca::kStats, lse},
           {ca::kScale, &s.scale},
           {ca::kMaskValue, &s.mask_value}},
          workspace.raw());
  return absl::OkStatus();
}

absl::Status CudnnAttentionBackward(Elem t, const AttentionDims& dims,
                                    const void* dout, const void* qkv,
                                    const void* out, const float* lse,
                                    void* dqkv, bool accumulate) {
  const AttentionDims d = cuda_launch::WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return absl::OkStatus();
  const int device = CurrentDevice();
  Context& c = ContextFor(device);
  TRELLIS_RETURN_IF_ERROR(
      CheckSupported(c, t, d, /*backward=*/true, {dout, qkv, out, lse, dqkv}));
  TRELLIS_ASSIGN_OR_RETURN(const Plan* plan,
                           PlanFor(c, {true, t, d.B, d.T, d.H, d.D, d.Hkv}));
  Scalars s(d.D);
  const int64_t n_qkv = d.B * d.T * (d.H + 2 * d.Hkv) * d.D;
  // [plan workspace | dQ float32 | Di float32 | dqkv scratch bfloat16, only
  // when accumulating]
  const size_t plan_bytes = RoundUp(plan->workspace_bytes);
  const size_t accum_bytes = RoundUp(sizeof(float) * d.B * d.H * d.T * d.D);
  const size_t sum_bytes = RoundUp(sizeof(float) * d.B * d.H * d.T);
  const size_t scratch_bytes = accumulate ? RoundUp(kBf16Bytes * n_qkv) : 0;
  const Tensor workspace =
      Workspace(device, plan_bytes + accum_bytes + sum_bytes + scratch_bytes);
  char* w = static_cast<char*>(workspace.raw());
  char* accum = w + plan_bytes;
  char* sum = accum + accum_bytes;
  void* grads = accumulate ? static_cast<void*>(sum + sum_bytes) : dqkv;
  // cuDNN before 9.6 expects the dQ accumulator zeroed; later ones set it
  // themselves (as cuDNN's own frontend does, which zero-fills it only then).
  if (cudnnGetVersion() < 90600) {
    TRELLIS_CUDA_CHECK(cudaMemsetAsync(accum, 0, accum_bytes, ComputeStream()));
    CountLaunches(1);
  }
  Execute(c, *plan,
          {{ca::kQ, At(qkv, 0)},
           {ca::kKt, At(qkv, KeyOffset(d))},
           {ca::kV, At(qkv, ValueOffset(d))},
           {ca::kO, const_cast<void*>(out)},
           {ca::kDO, const_cast<void*>(dout)},
           {ca::kStats, const_cast<float*>(lse)},
           {ca::kDQ, At(grads, 0)},
           {ca::kDK, At(grads, KeyOffset(d))},
           {ca::kDV, At(grads, ValueOffset(d))},
           {ca::kDqAccum, accum},
           {ca::kSoftmaxSum, sum},
           {ca::kScale, &s.scale},
           {ca::kMaskValue, &s.mask_value},
           {ca::kOne, &s.one}},
          w);
  if (accumulate) cuda_launch::Add(Elem::kBF16, dqkv, grads, dqkv, n_qkv);
  return absl::OkStatus();
}

int64_t CudnnAttentionPlanBuilds() {
  return ContextFor(CurrentDevice()).plan_builds;
}

}  // namespace cuda_internal
}  // namespace trellis
