// Internal to framework/cuda/: runs an attention call on the path asked for
// (attention_path.h), falling back where that path cannot take it:
//   kCudnn → cuDNN (attention_cudnn.h) where it takes the call; otherwise
//            kMma, printing to stderr, once per thread and reason,
//            "attention: cuDNN unavailable (<why>); falling back to
//            --attention=mma".
//   kMma   → the tensor-core kernels where they apply, else SIMT
//            (cuda_launch::AttentionForward / AttentionBackward).
//   kSimt  → the SIMT kernels (attention_simt.h).
// Contracts as cuda_launch::AttentionForward / AttentionBackward, except
// that backward with `accumulate` false overwrites dqkv instead of adding to
// it (cuDNN writes in place; the other paths zero dqkv first).
//
// Thread safety: as the paths it calls (per-thread cuDNN state).
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_SELECT_H_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_SELECT_H_

#include "framework/cuda/cuda_launch.h"
#include "framework/kernels/attention_path.h"

namespace trellis {
namespace cuda_internal {

void RunAttentionForward(AttentionPath path, cuda_launch::Elem t,
                         const cuda_launch::AttentionDims& d, const void* qkv,
                         void* out, float* lse);
void RunAttentionBackward(AttentionPath path, cuda_launch::Elem t,
                          const cuda_launch::AttentionDims& d, const void* dout,
                          const void* qkv, const void* out, const float* lse,
                          void* dqkv, bool accumulate);

}  // namespace cuda_internal
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_SELECT_H_
