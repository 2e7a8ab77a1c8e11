// The mixture-of-experts router (framework/kernels/router.h): one warp per
// token row, its E scores in shared memory; the balance losses' sums over
// rows through the deterministic column sums.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kWarps = 4;  // rows per block
constexpr int kThreads = 32 * kWarps;

// s (E) ← the scores of logits row l: softmax or sigmoid, by the warp.
template <typename T>
__device__ void RowScores(const T* l, int64_t E, bool sigmoid, float* s,
                          int lane) {
  if (sigmoid) {
    for (int64_t i = lane; i < E; i += 32) {
      s[i] = 1.f / (1.f + expf(-ToFloat(l[i])));
    }
    __syncwarp();
    return;
  }
  float max = -CUDART_INF_F;
  for (int64_t i = lane; i < E; i += 32) max = fmaxf(max, ToFloat(l[i]));
  max = WarpMax(max);
  float sum = 0.f;
  for (int64_t i = lane; i < E; i += 32) {
    const float v = expf(ToFloat(l[i]) - max);
    s[i] = v;
    sum += v;
  }
  sum = WarpSum(sum);
  for (int64_t i = lane; i < E; i += 32) s[i] /= sum;
  __syncwarp();
}

// logsumexp of logits row l, on every lane.
template <typename T>
__device__ float RowLogSumExp(const T* l, int64_t E, int lane) {
  float max = -CUDART_INF_F;
  for (int64_t i = lane; i < E; i += 32) max = fmaxf(max, ToFloat(l[i]));
  max = WarpMax(max);
  float sum = 0.f;
  for (int64_t i = lane; i < E; i += 32) sum += expf(ToFloat(l[i]) - max);
  return max + logf(WarpSum(sum));
}

// The warp's shared scratch: E floats after `floats_per_warp` each.
__device__ float* WarpScratch(float* shared, int64_t floats_per_warp) {
  return shared + (threadIdx.x / 32) * floats_per_warp;
}

template <typename T>
__global__ void TopKKernel(const T* logits, const T* bias, int64_t N, int64_t E,
                           int k, bool sigmoid, bool normalize, int32_t* index,
                           T* weight) {
  extern __shared__ float shared[];
  const int64_t t = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= N) return;
  float* s = WarpScratch(shared, 2 * E);
  float* taken = s + E;  // 1 once chosen
  RowScores(logits + t * E, E, sigmoid, s, lane);
  for (int64_t i = lane; i < E; i += 32) taken[i] = 0.f;
  __syncwarp();
  float sum = 0.f;
  for (int j = 0; j < k; ++j) {
    // Each lane's largest key not taken (ascending i, strict >: the lower
    // index on ties), then the warp's, the lower index on ties.
    float best_key = -CUDART_INF_F;
    int best = -1;
    for (int64_t i = lane; i < E; i += 32) {
      if (taken[i] != 0.f) continue;
      const float key = s[i] + (bias != nullptr ? ToFloat(bias[i]) : 0.f);
      if (best < 0 || key > best_key) {
        best_key = key;
        best = static_cast<int>(i);
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other_key = __shfl_xor_sync(0xffffffffu, best_key, offset);
      const int other = __shfl_xor_sync(0xffffffffu, best, offset);
      const bool better =
          other >= 0 && (best < 0 || other_key > best_key ||
                         (other_key == best_key && other < best));
      if (better) {
        best_key = other_key;
        best = other;
      }
    }
    const float score = s[best];
    sum += score;
    if (lane == 0) {
      taken[best] = 1.f;
      index[t * k + j] = best;
      weight[t * k + j] = FromFloat<T>(score);
    }
    __syncwarp();
  }
  if (normalize) {
    for (int j = lane; j < k; j += 32) {
      weight[t * k + j] = FromFloat<T>(s[index[t * k + j]] / sum);
    }
  }
}

template <typename T>
__global__ void TopKBackwardKernel(const T* logits, const int32_t* index,
                                   const T* weight, const T* dweight, int64_t N,
                                   int64_t E, int k, bool sigmoid,
                                   bool normalize, T* dlogits) {
  extern __shared__ float shared[];
  const int64_t t = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= N) return;
  float* s = WarpScratch(shared, 2 * E);
  float* ds = s + E;
  RowScores(logits + t * E, E, sigmoid, s, lane);
  for (int64_t i = lane; i < E; i += 32) ds[i] = 0.f;
  __syncwarp();
  const int32_t* idx = index + t * k;
  const T* w = weight + t * k;
  const T* dw = dweight + t * k;
  if (lane == 0) {
    if (normalize) {
      // w_j = s_j / S: ds_j = (dw_j - Σ_m dw_m w_m) / S.
      float sum = 0.f, dot = 0.f;
      for (int j = 0; j < k; ++j) {
        sum += s[idx[j]];
        dot += ToFloat(dw[j]) * ToFloat(w[j]);
      }
      for (int j = 0; j < k; ++j) ds[idx[j]] = (ToFloat(dw[j]) - dot) / sum;
    } else {
      for (int j = 0; j < k; ++j) ds[idx[j]] = ToFloat(dw[j]);
    }
  }
  __syncwarp();
  T* out = dlogits + t * E;
  if (sigmoid) {
    for (int64_t i = lane; i < E; i += 32) {
      out[i] = FromFloat<T>(ds[i] * s[i] * (1.f - s[i]));
    }
    return;
  }
  float dot = 0.f;
  for (int64_t i = lane; i < E; i += 32) dot += s[i] * ds[i];
  dot = WarpSum(dot);
  for (int64_t i = lane; i < E; i += 32) {
    out[i] = FromFloat<T>(s[i] * (ds[i] - dot));
  }
}

// Per row: stat[2t] the softmax's max (sigmoid: unused), stat[2t + 1] the
// normalizer of p (softmax: Σ exp(l - max); sigmoid: Σ s); lse[t] its
// logsumexp. Block 0 also zeroes the accumulators acc (E + 1).
template <typename T>
__global__ void RowStatsKernel(const T* logits, int64_t N, int64_t E,
                               bool sigmoid, float* stat, float* lse,
                               float* acc) {
  if (blockIdx.x == 0) {
    for (int64_t i = threadIdx.x; i <= E; i += blockDim.x) acc[i] = 0.f;
  }
  const int64_t t = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= N) return;
  const T* l = logits + t * E;
  float max = -CUDART_INF_F;
  for (int64_t i = lane; i < E; i += 32) max = fmaxf(max, ToFloat(l[i]));
  max = WarpMax(max);
  // The softmax's sum for the logsumexp either way; the sigmoids' sum only
  // when p is normalized sigmoids.
  float sum = 0.f, sig = 0.f;
  for (int64_t i = lane; i < E; i += 32) {
    sum += expf(ToFloat(l[i]) - max);
    if (sigmoid) sig += 1.f / (1.f + expf(-ToFloat(l[i])));
  }
  sum = WarpSum(sum);
  if (sigmoid) sig = WarpSum(sig);
  if (lane == 0) {
    stat[2 * t] = max;
    stat[2 * t + 1] = sigmoid ? sig : sum;
    lse[t] = max + logf(sum);
  }
}

// p(r, c) for the aux loss's column means.
template <typename T>
struct BalanceTerms {
  const T* logits;
  const float* stat;
  int64_t E;
  bool sigmoid;
  __device__ void operator()(int64_t r, int64_t c, float* acc) const {
    const float l = ToFloat(logits[r * E + c]);
    const float s = sigmoid ? 1.f / (1.f + expf(-l)) : expf(l - stat[2 * r]);
    acc[0] += s / stat[2 * r + 1];
  }
};

// lse(r)² for the z-loss.
struct SquareTerms {
  const float* lse;
  __device__ void operator()(int64_t r, int64_t, float* acc) const {
    acc[0] += lse[r] * lse[r];
  }
};

// losses = [E · Σ_e f_e · P_e, z / N] from the column sums.
__global__ void LossesFinishKernel(const float* acc, const int32_t* counts,
                                   int64_t N, int64_t E, int k, float* losses) {
  if (threadIdx.x != 0) return;
  const float slots = static_cast<float>(N * k);
  const float rows = static_cast<float>(N > 0 ? N : 1);
  float aux = 0.f;
  for (int64_t e = 0; e < E; ++e) {
    aux += static_cast<float>(counts[e]) / slots * acc[e];
  }
  losses[0] = static_cast<float>(E) * aux / rows;
  losses[1] = acc[E] / rows;
}

template <typename T>
__global__ void LossesBackwardKernel(const T* logits, const int32_t* counts,
                                     int64_t N, int64_t E, int k, bool sigmoid,
                                     float aux_scale, float z_scale,
                                     T* dlogits) {
  extern __shared__ float shared[];
  const int64_t t = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= N) return;
  float* s = WarpScratch(shared, E);
  const T* l = logits + t * E;
  const float rows = static_cast<float>(N);
  const float slots = static_cast<float>(N * k);
  // g_e = d(aux)/d(p_e) = aux_scale · E · f_e / N, the same for every row.
  auto g = [&](int64_t e) {
    return aux_scale * static_cast<float>(E) *
           (static_cast<float>(counts[e]) / slots) / rows;
  };
  RowScores(l, E, sigmoid, s, lane);
  float sum_s = 0.f;
  if (sigmoid) {
    for (int64_t i = lane; i < E; i += 32) sum_s += s[i];
    sum_s = WarpSum(sum_s);
  }
  // softmax: dl = s · (g - Σ s·g); sigmoid (p = s / Σ s): ds = (g - Σ g·p)
  // / Σ s, dl = ds · s · (1 - s).
  float dot = 0.f;
  for (int64_t i = lane; i < E; i += 32) {
    dot += g(i) * (sigmoid ? s[i] / sum_s : s[i]);
  }
  dot = WarpSum(dot);
  // d(z)/d(l) = 2 · lse · softmax(l) / N.
  const float lse = RowLogSumExp(l, E, lane);
  const float zg = z_scale * 2.f * lse / rows;
  T* out = dlogits + t * E;
  for (int64_t i = lane; i < E; i += 32) {
    const float dl = sigmoid ? (g(i) - dot) / sum_s * s[i] * (1.f - s[i])
                             : s[i] * (g(i) - dot);
    const float soft = expf(ToFloat(l[i]) - lse);
    out[i] = FromFloat<T>(ToFloat(out[i]) + dl + zg * soft);
  }
}

// At least one block (RouterLosses' first block zeroes its accumulators).
unsigned RowBlocks(int64_t N) {
  return static_cast<unsigned>(std::max<int64_t>(1, (N + kWarps - 1) / kWarps));
}

size_t SharedBytes(int64_t floats_per_warp) {
  return sizeof(float) * static_cast<size_t>(kWarps * floats_per_warp);
}

}  // namespace

void RouterTopK(Elem t, const void* logits, const void* bias, int64_t N,
                int64_t E, int k, bool sigmoid, bool normalize, int32_t* index,
                void* weight) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    TopKKernel<<<RowBlocks(N), kThreads, SharedBytes(2 * E)>>>(
        static_cast<const T*>(logits), static_cast<const T*>(bias), N, E, k,
        sigmoid, normalize, index, static_cast<T*>(weight));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void RouterTopKBackward(Elem t, const void* logits, const int32_t* index,
                        const void* weight, const void* dweight, int64_t N,
                        int64_t E, int k, bool sigmoid, bool normalize,
                        void* dlogits) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    TopKBackwardKernel<<<RowBlocks(N), kThreads, SharedBytes(2 * E)>>>(
        static_cast<const T*>(logits), index, static_cast<const T*>(weight),
        static_cast<const T*>(dweight), N, E, k, sigmoid, normalize,
        static_cast<T*>(dlogits));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void RouterLosses(Elem t, const void* logits, const int32_t* counts, int64_t N,
                  int64_t E, int k, bool sigmoid, float* losses) {
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    const auto* l = static_cast<const T*>(logits);
    Scratch<float> stat(2 * N), lse(N), acc(E + 1);
    RowStatsKernel<<<RowBlocks(N), kThreads>>>(l, N, E, sigmoid, stat.get(),
                                               lse.get(), acc.get());
    TRELLIS_CUDA_CHECK_LAUNCH();
    LaunchColumnSums<1>(BalanceTerms<T>{l, stat.get(), E, sigmoid}, N, E,
                        acc.get(), static_cast<float*>(nullptr));
    LaunchColumnSums<1>(SquareTerms{lse.get()}, N, 1, acc.get() + E,
                        static_cast<float*>(nullptr));
    LossesFinishKernel<<<1, 32>>>(acc.get(), counts, N, E, k, losses);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void RouterLossesBackward(Elem t, const void* logits, const int32_t* counts,
                          int64_t N, int64_t E, int k, bool sigmoid,
                          float aux_scale, float z_scale, void* dlogits) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    LossesBackwardKernel<<<RowBlocks(N), kThreads, SharedBytes(E)>>>(
        static_cast<const T*>(logits), counts, N, E, k, sigmoid, aux_scale,
        z_scale, static_cast<T*>(dlogits));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
