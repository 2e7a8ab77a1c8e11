// Internal to framework/cuda/: the launcher of cached_attention.cu, on raw
// device pointers (see cached_attention_cuda.h for the contract). Light (no
// Abseil, no CUDA headers, no C++20) so that the .cu file includes it.
#ifndef TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_LAUNCH_H_
#define TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_LAUNCH_H_

#include <cstdint>

#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_launch {

// Keys one query can attend to and the largest head size: a row's scores
// and its query (floats) live in the 48 KiB of shared memory a block gets
// without opting in, beside the block reduction's 32 floats.
inline constexpr int64_t kMaxCachedAttentionKeys = 12288 - 512 - 64;
inline constexpr int64_t kMaxCachedAttentionHeadDim = 512;

// Appends the n new rows' keys and values (qkv (n, (H + 2·Hkv)·D)) at rows
// [start, start + n) of the caches, then out (n, H·D) = attention of each
// new row over cached rows 0 .. start + i. Runs on ComputeStream().
void CachedAttention(Elem t, const void* qkv, int64_t n, int64_t heads,
                     int64_t kv_heads, int64_t D, int64_t start, void* k_cache,
                     void* v_cache, void* out);

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CACHED_ATTENTION_LAUNCH_H_
