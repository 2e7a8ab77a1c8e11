// The per-head q/k RMSNorm in a fused qkv row (Qwen3's q_norm and k_norm):
// one warp per (row, head), the weight gradient through the deterministic
// column sums.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

// Where (row i, normed head h) lives: its channels in the qkv row, its saved
// input and its rstd.
struct QkHead {
  int64_t qkv;    // offset of its D channels in qkv / dqkv
  int64_t saved;  // offset of its D channels in `in`
  int64_t stat;   // index in rstd
  bool query;
};

__device__ __forceinline__ QkHead HeadAt(int64_t pair, int64_t normed,
                                         int64_t W, int64_t D, int64_t heads) {
  const int64_t i = pair / normed, h = pair % normed;
  return QkHead{i * W + h * D, pair * D, pair, h < heads};
}

template <typename T>
__global__ void QkNormForwardKernel(T* qkv, int64_t pairs, int64_t normed,
                                    int64_t W, int64_t D, int64_t heads,
                                    const T* wq, const T* wk, float eps, T* in,
                                    float* rstd) {
  const int64_t pair = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= pairs) return;
  const QkHead at = HeadAt(pair, normed, W, D, heads);
  T* x = qkv + at.qkv;
  T* saved = in + at.saved;
  const T* w = at.query ? wq : wk;
  float squares = 0.f;
  for (int64_t c = lane; c < D; c += 32) {
    const float v = ToFloat(x[c]);
    squares += v * v;
  }
  const float s = rsqrtf(WarpSum(squares) / static_cast<float>(D) + eps);
  // Each lane rewrites only the columns it read.
  for (int64_t c = lane; c < D; c += 32) {
    const T v = x[c];
    saved[c] = v;
    x[c] = FromFloat<T>(ToFloat(v) * s * ToFloat(w[c]));
  }
  if (lane == 0) rstd[at.stat] = s;
}

// dqkv's head ← rstd · (g · w - x̂ · mean(g · w · x̂)), g its gradient at
// the norm's output, in place.
template <typename T>
__global__ void QkNormBackwardKernel(T* dqkv, int64_t pairs, int64_t normed,
                                     int64_t W, int64_t D, int64_t heads,
                                     const T* in, const float* rstd,
                                     const T* wq, const T* wk) {
  const int64_t pair = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= pairs) return;
  const QkHead at = HeadAt(pair, normed, W, D, heads);
  T* g = dqkv + at.qkv;
  const T* x = in + at.saved;
  const T* w = at.query ? wq : wk;
  const float s = rstd[at.stat];
  float dot = 0.f;
  for (int64_t c = lane; c < D; c += 32) {
    dot += ToFloat(g[c]) * ToFloat(w[c]) * ToFloat(x[c]) * s;
  }
  const float mean = WarpSum(dot) / static_cast<float>(D);
  for (int64_t c = lane; c < D; c += 32) {
    const float xhat = ToFloat(x[c]) * s;
    g[c] = FromFloat<T>(s * (ToFloat(g[c]) * ToFloat(w[c]) - xhat * mean));
  }
}

// The weight gradient's terms, a row per (row, normed head) pair: a query
// head's into acc[0] (wq's gradient), a key head's into acc[1] (wk's).
template <typename T>
struct QkWeightTerms {
  const T* dqkv;
  const T* in;
  const float* rstd;
  int64_t normed, W, D, heads;
  __device__ void operator()(int64_t pair, int64_t c, float* acc) const {
    const QkHead at = HeadAt(pair, normed, W, D, heads);
    acc[at.query ? 0 : 1] +=
        ToFloat(dqkv[at.qkv + c]) * ToFloat(in[at.saved + c]) * rstd[at.stat];
  }
};

unsigned PairBlocks(int64_t pairs) {
  return static_cast<unsigned>((pairs + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void QkNormForward(Elem t, void* qkv, int64_t N, int64_t heads,
                   int64_t kv_heads, int64_t D, const void* wq, const void* wk,
                   float eps, void* in, float* rstd) {
  const int64_t normed = heads + kv_heads, pairs = N * normed;
  if (pairs == 0 || D == 0) return;
  const int64_t W = (heads + 2 * kv_heads) * D;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    QkNormForwardKernel<<<PairBlocks(pairs), kThreads>>>(
        static_cast<T*>(qkv), pairs, normed, W, D, heads,
        static_cast<const T*>(wq), static_cast<const T*>(wk), eps,
        static_cast<T*>(in), rstd);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void QkNormBackward(Elem t, void* dqkv, int64_t N, int64_t heads,
                    int64_t kv_heads, int64_t D, const void* in,
                    const float* rstd, const void* wq, const void* wk,
                    Elem w_type, void* dw) {
  const int64_t normed = heads + kv_heads, pairs = N * normed;
  if (pairs == 0 || D == 0) return;
  const int64_t W = (heads + 2 * kv_heads) * D;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchElem(w_type, [&](auto g) {
      using G = decltype(g);
      // The column sums read dqkv before the input gradient below
      // overwrites it (in stream order).
      G* dwq = static_cast<G*>(dw);
      const auto* x = static_cast<const T*>(in);
      LaunchColumnSums<2>(QkWeightTerms<T>{static_cast<const T*>(dqkv), x, rstd,
                                           normed, W, D, heads},
                          pairs, D, dwq, dwq + D);
      QkNormBackwardKernel<<<PairBlocks(pairs), kThreads>>>(
          static_cast<T*>(dqkv), pairs, normed, W, D, heads, x, rstd,
          static_cast<const T*>(wq), static_cast<const T*>(wk));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
