// The pieces of a vocabulary-parallel softmax cross-entropy: one block per
// row for the row statistics and the backward, float32 statistics for
// float32 or bfloat16 logits; and the fused classifier, which does all of
// it for a row in one block (one online pass for the max and the sum of
// exponentials, a second, from L2, that writes the gradient). The row kernels
// read (and the backward writes) 16 bytes at a time when every row is 16-byte
// aligned (P elements per pack), then the row's tail one element at a time.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;
// The fused classifier's block: few rows in flight per multiprocessor (two
// blocks of 1024 threads, so at most 32 registers a thread), so that a row read
// by the first pass is still in L2 when the second pass reads it again (132 × 2
// rows of GPT-2's 50304 bfloat16 logits are 27 MB; at 256 threads, eight blocks
// per multiprocessor would keep 106 MB in flight and the second read would come
// from HBM).
constexpr int kFusedThreads = 1024;

// The target's column on this shard, or -1 when another shard holds it.
__device__ __forceinline__ int64_t LocalColumn(int32_t target,
                                               int64_t vocab_start,
                                               int64_t valid) {
  const int64_t col = static_cast<int64_t>(target) - vocab_start;
  return col >= 0 && col < valid ? col : -1;
}

template <int P, typename T>
__global__ void RowMaxKernel(const T* logits, int64_t Vl, int64_t valid,
                             float* row_max) {
  const T* row = logits + blockIdx.x * Vl;
  float best = -CUDART_INF_F;
  const int64_t packs = valid / P;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, P> v = LoadPack<P>(row + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) best = fmaxf(best, ToFloat(v.v[k]));
  }
  for (int64_t j = packs * P + threadIdx.x; j < valid; j += blockDim.x) {
    best = fmaxf(best, ToFloat(row[j]));
  }
  best = BlockReduce<float, /*kMax=*/true>(best);
  if (threadIdx.x == 0) row_max[blockIdx.x] = best;
}

template <int P, typename T>
__global__ void RowSumExpKernel(const T* logits, int64_t Vl, int64_t valid,
                                const float* row_max, float* sumexp) {
  const T* row = logits + blockIdx.x * Vl;
  const float m = row_max[blockIdx.x];
  float sum = 0.f;
  const int64_t packs = valid / P;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, P> v = LoadPack<P>(row + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) sum += expf(ToFloat(v.v[k]) - m);
  }
  for (int64_t j = packs * P + threadIdx.x; j < valid; j += blockDim.x) {
    sum += expf(ToFloat(row[j]) - m);
  }
  sum = BlockReduce<float>(sum);
  if (threadIdx.x == 0) sumexp[blockIdx.x] = sum;
}

template <typename T>
__global__ void TargetLogitKernel(const T* logits, const int32_t* targets,
                                  int64_t N, int64_t Vl, int64_t vocab_start,
                                  int64_t valid, float* target_logit) {
  TRELLIS_GRID_STRIDE(i, N) {
    const int64_t col = LocalColumn(targets[i], vocab_start, valid);
    target_logit[i] = col >= 0 ? ToFloat(logits[i * Vl + col]) : 0.f;
  }
}

__global__ void LossKernel(const float* row_max, const float* sumexp,
                           const float* target_logit, int64_t N,
                           float* losses) {
  TRELLIS_GRID_STRIDE(i, N) {
    losses[i] = logf(sumexp[i]) + row_max[i] - target_logit[i];
  }
}

// Each element (or pack) is read before it is written by the same thread,
// so dlogits may alias logits.
template <int P, typename T>
__global__ void BackwardKernel(const T* logits, const int32_t* targets,
                               int64_t Vl, int64_t vocab_start, int64_t valid,
                               const float* row_max, const float* sumexp,
                               float scale, T* dlogits) {
  const int64_t i = blockIdx.x;
  const T* row = logits + i * Vl;
  T* drow = dlogits + i * Vl;
  const float m = row_max[i], mul = scale / sumexp[i];
  const int64_t target = LocalColumn(targets[i], vocab_start, valid);
  const auto grad = [&](int64_t j, float logit) {
    float g = 0.f;
    if (j < valid) {
      g = expf(logit - m) * mul;
      if (j == target) g -= scale;
    }
    return g;
  };
  const int64_t packs = Vl / P;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    Pack<T, P> v = LoadPack<P>(row + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      v.v[k] = FromFloat<T>(grad(p * P + k, ToFloat(v.v[k])));
    }
    StorePack<P>(drow + p * P, v);
  }
  for (int64_t j = packs * P + threadIdx.x; j < Vl; j += blockDim.x) {
    drow[j] = FromFloat<T>(grad(j, ToFloat(row[j])));
  }
}

// A running (max, sum of exp(x - max)) pair of one thread.
// (Start it at {-inf, 0}.)
struct OnlineSum {
  float max, sum;
  // Adds the values v[0..P) whose max is vmax.
  template <int P>
  __device__ __forceinline__ void Add(const float (&v)[P], float vmax) {
    if (vmax > max) {
      sum *= expf(max - vmax);  // 0 while max is -inf and sum 0
      max = vmax;
    }
    if (max == -CUDART_INF_F) return;  // only -inf seen so far
#pragma unroll
    for (int k = 0; k < P; ++k) sum += expf(v[k] - max);
  }
};

// One block per row: row max and sum of exponentials in one pass (each
// thread's running pair, merged over the block), the loss, then dlogits
// over the same elements each thread read (so it may alias logits).
template <int P, typename T>
__global__ void __launch_bounds__(kFusedThreads, 2)
    FusedKernel(const T* logits, const int32_t* targets, int64_t Vl,
                int64_t valid, const float* row_weights, float scale,
                float* losses, T* dlogits) {
  const int64_t i = blockIdx.x;
  const T* row = logits + i * Vl;
  const int64_t target = LocalColumn(targets[i], 0, valid);
  // Read before any thread overwrites the row.
  const float target_logit =
      threadIdx.x == 0 && target >= 0 ? ToFloat(row[target]) : 0.f;
  OnlineSum acc{-CUDART_INF_F, 0.f};
  const int64_t packs = valid / P;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, P> v = LoadPack<P>(row + p * P);
    float x[P];
    float vmax = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      x[k] = ToFloat(v.v[k]);
      vmax = fmaxf(vmax, x[k]);
    }
    acc.Add<P>(x, vmax);
  }
  for (int64_t j = packs * P + threadIdx.x; j < valid; j += blockDim.x) {
    const float x[1] = {ToFloat(row[j])};
    acc.Add<1>(x, x[0]);
  }
  const float m = BlockReduce<float, /*kMax=*/true>(acc.max);
  const float mine =
      acc.max == -CUDART_INF_F ? 0.f : acc.sum * expf(acc.max - m);
  const float sumexp = BlockReduce<float>(mine);
  const float w = row_weights != nullptr ? row_weights[i] : 1.f;
  if (threadIdx.x == 0) {
    losses[i] = (logf(sumexp) + m - target_logit) * w;
  }
  if (dlogits == nullptr) return;
  const float g = scale * w, mul = g / sumexp;
  T* drow = dlogits + i * Vl;
  const auto grad = [&](int64_t j, float logit) {
    float d = 0.f;
    if (j < valid) {
      d = expf(logit - m) * mul;
      if (j == target) d -= g;
    }
    return d;
  };
  // Every column, padding included. Each thread reads a pack before it
  // writes it, and the reductions' barriers put every read of the first
  // pass before any write.
  const int64_t all_packs = Vl / P;
  for (int64_t p = threadIdx.x; p < all_packs; p += blockDim.x) {
    Pack<T, P> v = LoadPack<P>(row + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      v.v[k] = FromFloat<T>(grad(p * P + k, ToFloat(v.v[k])));
    }
    StorePack<P>(drow + p * P, v);
  }
  for (int64_t j = all_packs * P + threadIdx.x; j < Vl; j += blockDim.x) {
    drow[j] = FromFloat<T>(grad(j, ToFloat(row[j])));
  }
}

}  // namespace

void CrossEntropyRowMax(Elem t, const void* logits, int64_t N, int64_t Vl,
                        int64_t valid, float* row_max) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({logits}, Vl, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      RowMaxKernel<P><<<static_cast<unsigned>(N), kThreads>>>(
          static_cast<const T*>(logits), Vl, valid, row_max);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CrossEntropyRowSumExp(Elem t, const void* logits, int64_t N, int64_t Vl,
                           int64_t valid, const float* row_max, float* sumexp) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({logits}, Vl, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      RowSumExpKernel<P><<<static_cast<unsigned>(N), kThreads>>>(
          static_cast<const T*>(logits), Vl, valid, row_max, sumexp);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CrossEntropyTargetLogit(Elem t, const void* logits, const int32_t* targets,
                             int64_t N, int64_t Vl, int64_t vocab_start,
                             int64_t valid, float* target_logit) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    TargetLogitKernel<<<GridFor(N, kThreads), kThreads>>>(
        static_cast<const T*>(logits), targets, N, Vl, vocab_start, valid,
        target_logit);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CrossEntropyLoss(const float* row_max, const float* sumexp,
                      const float* target_logit, int64_t N, float* losses) {
  if (N == 0) return;
  LossKernel<<<GridFor(N, kThreads), kThreads>>>(row_max, sumexp, target_logit,
                                                 N, losses);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CrossEntropyBackward(Elem t, const void* logits, const int32_t* targets,
                          int64_t N, int64_t Vl, int64_t vocab_start,
                          int64_t valid, const float* row_max,
                          const float* sumexp, float scale, void* dlogits) {
  if (N == 0 || Vl == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({logits, dlogits}, Vl, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      BackwardKernel<P><<<static_cast<unsigned>(N), kThreads>>>(
          static_cast<const T*>(logits), targets, Vl, vocab_start, valid,
          row_max, sumexp, scale, static_cast<T*>(dlogits));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CrossEntropyFused(Elem t, const void* logits, const int32_t* targets,
                       int64_t N, int64_t Vl, int64_t valid,
                       const float* row_weights, float scale, float* losses,
                       void* dlogits) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({logits, dlogits}, Vl, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      FusedKernel<P><<<static_cast<unsigned>(N), kFusedThreads>>>(
          static_cast<const T*>(logits), targets, Vl, valid, row_weights, scale,
          losses, static_cast<T*>(dlogits));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
