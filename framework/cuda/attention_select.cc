#include "framework/cuda/attention_select.h"

#include <iostream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "framework/cuda/attention_cudnn.h"
#include "framework/cuda/attention_simt.h"

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
                          void* dqkv) {
  if (path == AttentionPath::kCudnn) {
    const absl::Status status =
        CudnnAttentionBackward(t, d, dout, qkv, out, lse, dqkv);
    if (status.ok()) return;
    NoteFallback(status);
    path = AttentionPath::kMma;
  }
  if (path == AttentionPath::kMma) {
    cuda_launch::AttentionBackward(t, d, dout, qkv, out, lse, dqkv);
  } else {
    cuda_launch::SimtAttentionBackward(t, d, dout, qkv, out, lse, dqkv);
  }
}

}  // namespace cuda_internal
}  // namespace trellis
