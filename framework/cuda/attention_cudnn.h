// Internal to framework/cuda/: causal attention through cuDNN's fused flash
// attention, built with the backend (graph) API (attention_cudnn_graph.h).
//
// Same contract as cuda_launch::AttentionForward / AttentionBackward: qkv
// (B, T, (H + 2·Hkv)·D) is read in place as strided Q, K, V views
// (attention_cudnn_layout.h), out (B, T, H·D) is written, lse (B, H, T)
// float32 gets the natural-log row log-sum-exps of the scaled scores, and
// backward with `accumulate` ADDS the gradients onto dqkv (cuDNN writes them
// into a bfloat16 scratch copy of the packed layout, then one elementwise
// add); without it cuDNN writes them into dqkv itself.
//
// Each function returns OK after launching its work on ComputeStream(), or
// Unavailable naming why cuDNN cannot take the call, having launched
// nothing: inputs other than bfloat16 (cuDNN's fused attention is float16 /
// bfloat16 only), a head width that is not a multiple of 8 up to 128, a
// buffer not 16-byte aligned, compute capability below 8.0, cuDNN older than
// 9.0 or 9.10.0/9.10.1 (known fused-attention bugs), one token in backward
// (and in forward before cuDNN 9.10), or no engine that finalizes a plan for
// the graph (the cuDNN call and status named). Failures while running an
// already built plan abort.
//
// Execution plans and their workspace sizes are cached per (pass, B, T, H, D,
// Hkv, type) on each thread and device; the strides are a function of those
// (the packed layouts), so they need no key of their own. A failure to build is
// cached as well, so it costs one attempt. Workspace (the plan's, plus for
// backward the float32 dQ accumulator (B·H·T·D·4 bytes; zero-filled only for
// cuDNN before 9.6, which expects it), the dO·O row sums (B·H·T·4) and, when
// accumulating, the bfloat16 gradient scratch (B·T·(H + 2·Hkv)·D·2)) comes
// from the run's allocator (Tensor::Empty: the memory arena while one is in
// scope) for the duration of a call.
//
// Thread safety: each thread has its own handles, plans and workspace.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_H_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_H_

#include <cstdint>

#include "absl/status/status.h"
#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_internal {

absl::Status CudnnAttentionForward(cuda_launch::Elem t,
                                   const cuda_launch::AttentionDims& d,
                                   const void* qkv, void* out, float* lse);
absl::Status CudnnAttentionBackward(cuda_launch::Elem t,
                                    const cuda_launch::AttentionDims& d,
                                    const void* dout, const void* qkv,
                                    const void* out, const float* lse,
                                    void* dqkv, bool accumulate = true);

// How many execution plans the calling thread has tried to build for the
// current device (each cache miss counts once, built or not).
int64_t CudnnAttentionPlanBuilds();

}  // namespace cuda_internal
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_H_
