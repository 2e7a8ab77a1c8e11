// Attention of new tokens over a key/value cache (cached_attention_cuda.h):
// a copy kernel appends the new keys and values, then one block per (query
// row, head) scores the row against every cached key in shared memory,
// softmaxes it and sums the values. Decoding is one row per step and bound
// by reading the cache, which this layout reads once per head.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/cached_attention_launch.h"
#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 128;

// Rows [start, start + n) of both caches (Tcap, Hkv·D) from the k and v
// heads of qkv (n, W).
template <typename T>
__global__ void AppendKvKernel(const T* qkv, int64_t n, int64_t W,
                               int64_t q_width, int64_t kv_width, int64_t start,
                               T* k_cache, T* v_cache) {
  TRELLIS_GRID_STRIDE(e, n * kv_width) {
    const int64_t i = e / kv_width, c = e % kv_width;
    const T* row = qkv + i * W + q_width;
    k_cache[(start + i) * kv_width + c] = row[c];
    v_cache[(start + i) * kv_width + c] = row[kv_width + c];
  }
}

// Block (i, h): out[i, h] = softmax(q·Kᵀ / sqrt(D)) V over keys
// 0 .. start + i. Shared memory: the query (D floats), then the scores.
template <typename T>
__global__ void CachedAttentionKernel(const T* qkv, int64_t W, int64_t heads,
                                      int64_t group, int64_t D, int64_t start,
                                      const T* k_cache, const T* v_cache,
                                      T* out) {
  extern __shared__ float shared[];
  float* q = shared;
  float* p = shared + D;
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const int64_t keys = start + i + 1;
  const int64_t kv_width = heads / group * D;
  const int64_t kv = (h / group) * D;
  const float scale = rsqrtf(static_cast<float>(D));
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    q[c] = ToFloat(qkv[i * W + h * D + c]);
  }
  __syncthreads();
  float max = -CUDART_INF_F;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const T* k = k_cache + j * kv_width + kv;
    float dot = 0.f;
    for (int64_t c = 0; c < D; ++c) dot += q[c] * ToFloat(k[c]);
    p[j] = dot * scale;
    max = fmaxf(max, p[j]);
  }
  max = BlockReduce<float, true>(max);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    p[j] = expf(p[j] - max);
    sum += p[j];
  }
  sum = BlockReduce<float>(sum);  // Its barrier also publishes p.
  const float inv = 1.f / sum;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < keys; ++j) {
      acc += p[j] * ToFloat(v_cache[j * kv_width + kv + c]);
    }
    out[i * heads * D + h * D + c] = FromFloat<T>(acc * inv);
  }
}

}  // namespace

void CachedAttention(Elem t, const void* qkv, int64_t n, int64_t heads,
                     int64_t kv_heads, int64_t D, int64_t start, void* k_cache,
                     void* v_cache, void* out) {
  if (n == 0) return;
  const int64_t W = (heads + 2 * kv_heads) * D;
  const int64_t kv_width = kv_heads * D;
  const size_t shared = sizeof(float) * static_cast<size_t>(D + start + n);
  DispatchElem(t, [&](auto tag) {
    using E = decltype(tag);
    const auto* x = static_cast<const E*>(qkv);
    auto* kc = static_cast<E*>(k_cache);
    auto* vc = static_cast<E*>(v_cache);
    AppendKvKernel<<<GridFor(n * kv_width, 256), 256>>>(
        x, n, W, heads * D, kv_width, start, kc, vc);
    TRELLIS_CUDA_CHECK_LAUNCH();
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(heads));
    CachedAttentionKernel<<<grid, kThreads, shared>>>(
        x, W, heads, heads / kv_heads, D, start, kc, vc, static_cast<E*>(out));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
