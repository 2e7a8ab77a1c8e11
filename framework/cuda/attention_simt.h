// Internal to framework/cuda/: the float32 CUDA-core (SIMT) kernels of
// causal attention (attention.cu) on their own. cuda_launch::AttentionForward
// and AttentionBackward (cuda_launch.h) take the tensor-core kernels where
// they apply and these otherwise; these entry points keep a call here, so
// that the paths can be compared on one GPU (--attention=simt).
//
// Same contract as cuda_launch::AttentionForward / AttentionBackward: qkv
// (B, T, 3·H·D), out (B, T, H·D) of type t, lse (B, H, T) float32; backward
// adds onto dqkv. Runs on ComputeStream(), checks its launches.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_SIMT_H_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_SIMT_H_

#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_launch {

void SimtAttentionForward(Elem t, const AttentionDims& d, const void* qkv,
                          void* out, float* lse);
void SimtAttentionBackward(Elem t, const AttentionDims& d, const void* dout,
                           const void* qkv, const void* out, const float* lse,
                           void* dqkv);

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_SIMT_H_
