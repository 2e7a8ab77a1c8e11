#include "framework/cuda/attention_select.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <iostream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "framework/cuda/attention_cudnn.h"
#include "framework/cuda/attention_simt.h"
#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/launch_count.h"

namespace trellis {
namespace cuda_internal {
namespace {

// Prints why cuDNN did not take a call, once per thread and distinct reason.
void NoteFallback(const absl::Status& why) {
  thread_local std::set<std::string> noted;
  std::string reason(why.message());
  if (!noted.insert(reason).second) return;
  std::cerr << "attention: cuDNN unavailable (" << reason
            << "); falling back to --attention=mma" << std::endl;
}

// Zero-fills dqkv, (B, T, (H + 2·Hkv)·D) elements of t, on the compute
// stream.
void ZeroQkv(cuda_launch::Elem t, const cuda_launch::AttentionDims& dims,
             void* dqkv) {
  const cuda_launch::AttentionDims d = cuda_launch::WithKvHeads(dims);
  const size_t bytes = (t == cuda_launch::Elem::kBF16 ? 2 : 4) *
                       static_cast<size_t>(d.B * d.T * (d.H + 2 * d.Hkv) * d.D);
  TRELLIS_CUDA_CHECK(cudaMemsetAsync(dqkv, 0, bytes, ComputeStream()));
  CountLaunches(1);
}

}  // namespace

void RunAttentionForward(AttentionPath path, cuda_launch::Elem t,
                         const cuda_launch::AttentionDims& d, const void* qkv,
                         void* out, float* lse) {
  if (path == AttentionPath::kCudnn) {
    const absl::Status status = CudnnAttentionForward(t, d, qkv, out, lse);
    if (status.ok()) return;
    NoteFallback(status);
    path = AttentionPath::kMma;
  }
  if (path == AttentionPath::kMma) {
    cuda_launch::AttentionForward(t, d, qkv, out, lse);
  } else {
    cuda_launch::SimtAttentionForward(t, d, qkv, out, lse);
  }
}

void RunAttentionBackward(AttentionPath path, cuda_launch::Elem t,
                          const cuda_launch::AttentionDims& d, const void* dout,
                          const void* qkv, const void* out, const float* lse,
                          void* dqkv, bool accumulate) {
  if (path == AttentionPath::kCudnn) {
    const absl::Status status =
        CudnnAttentionBackward(t, d, dout, qkv, out, lse, dqkv, accumulate);
    if (status.ok()) return;
    NoteFallback(status);
    path = AttentionPath::kMma;
  }
  // The kernels below add into dqkv.
  if (!accumulate) ZeroQkv(t, d, dqkv);
  if (path == AttentionPath::kMma) {
    cuda_launch::AttentionBackward(t, d, dout, qkv, out, lse, dqkv);
  } else {
    cuda_launch::SimtAttentionBackward(t, d, dout, qkv, out, lse, dqkv);
  }
}

}  // namespace cuda_internal
}  // namespace trellis
