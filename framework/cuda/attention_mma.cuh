// Internal to framework/cuda/: the tensor-core path of causal attention
// (attention_mma.cu). Same inputs, outputs and saved row log-sum-exps as the
// float32 SIMT kernels of attention.cu, for bfloat16 at head widths 32, 64
// and 128; attention.cu picks between the two.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_CUH_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_CUH_

#include <initializer_list>

#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_launch {

// Whether the tensor-core kernels take a call of type t and dims d on these
// device pointers: bfloat16, D ∈ {32, 64, 128}, every pointer 16-byte
// aligned (tiles load 8 elements at a time), a current device of compute
// capability 8.0 or newer that grants the kernels' shared memory, and device
// code for it built for compute_80 or newer (a build for older architectures
// only keeps every call on the SIMT kernels).
bool MmaAttentionSupported(Elem t, const AttentionDims& d,
                           std::initializer_list<const void*> pointers);

// As AttentionForward / AttentionBackward (cuda_launch.h) for bfloat16.
// REQUIRES: MmaAttentionSupported(Elem::kBF16, d, {every pointer}).
void MmaAttentionForward(const AttentionDims& d, const void* qkv, void* out,
                         float* lse);
void MmaAttentionBackward(const AttentionDims& d, const void* dout,
                          const void* qkv, const void* out, const float* lse,
                          void* dqkv);

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_CUH_
