// The pieces of a vocabulary-parallel softmax cross-entropy: one block per
// row for the row statistics and the backward, float32 statistics for
// float32 or bfloat16 logits. The row kernels read (and the backward
// writes) 16 bytes at a time when every row is 16-byte aligned (P elements
// per pack), then the row's tail one element at a time.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;

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

}  // namespace cuda_launch
}  // namespace trellis
