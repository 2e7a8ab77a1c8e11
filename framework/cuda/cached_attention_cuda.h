// Internal to framework/: the CUDA twin of CachedAttentionForward
// (framework/kernels/cached_attention.h), behind TRELLIS_CUDA_DISPATCH. Same
// contract; float32 arithmetic for float32 and bfloat16 tensors; the
// context (start + n keys) and the head size are capped by the launch's
// shared memory (cached_attention_launch.h).
#ifndef TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_CUDA_H_
#define TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_CUDA_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {
namespace cuda {

void CachedAttentionForward(const Tensor& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t start, Tensor& k_cache,
                            Tensor& v_cache, Tensor& out);

}  // namespace cuda
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_CUDA_H_
