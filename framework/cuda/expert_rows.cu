// Moving token rows to their experts and back (framework/kernels/
// expert_rows.h): the stable counting sort of the routed slots in three
// passes over chunks of slots, and the row gathers, scatters and weighted
// sums, each in a fixed order.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kChunk = 256;  // slots per block of the counting sort
constexpr int kThreads = 256;

// Pass 1: chunk b's count of each expert, chunk_counts[b · E + e].
__global__ void ChunkCountsKernel(const int32_t* index, int64_t slots,
                                  int64_t E, int32_t* chunk_counts) {
  extern __shared__ int32_t count[];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t s = blockIdx.x * int64_t{kChunk} + threadIdx.x;
  if (s < slots) atomicAdd(&count[index[s]], 1);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    chunk_counts[blockIdx.x * E + e] = count[e];
  }
}

// Pass 2 (one block): counts[e], then chunk_counts[b · E + e] ← the row of
// chunk b's first slot of expert e (expert e's offset plus the earlier
// chunks' counts of it).
__global__ void ChunkOffsetsKernel(int64_t chunks, int64_t E,
                                   int32_t* chunk_counts, int32_t* counts) {
  extern __shared__ int32_t offset[];
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t total = 0;
    for (int64_t b = 0; b < chunks; ++b) total += chunk_counts[b * E + e];
    counts[e] = total;
    offset[e] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t next = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int32_t c = offset[e];
      offset[e] = next;
      next += c;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t next = offset[e];
    for (int64_t b = 0; b < chunks; ++b) {
      const int32_t c = chunk_counts[b * E + e];
      chunk_counts[b * E + e] = next;
      next += c;
    }
  }
}

// Pass 3: route[s] = its chunk's first row of its expert plus the slots of
// that expert before it in the chunk.
__global__ void PlaceKernel(const int32_t* index, int64_t slots, int64_t E,
                            const int32_t* chunk_offsets, int32_t* route) {
  __shared__ int32_t expert[kChunk];
  const int64_t first = blockIdx.x * int64_t{kChunk};
  const int64_t s = first + threadIdx.x;
  expert[threadIdx.x] = s < slots ? index[s] : -1;
  __syncthreads();
  if (s >= slots) return;
  const int32_t e = expert[threadIdx.x];
  int32_t before = 0;
  for (int i = 0; i < static_cast<int>(threadIdx.x); ++i) {
    before += expert[i] == e;
  }
  route[s] = chunk_offsets[blockIdx.x * E + e] + before;
}

template <typename T>
__global__ void DispatchKernel(const T* x, const int32_t* route, int64_t n,
                               int64_t k, int64_t C, T* x_perm) {
  TRELLIS_GRID_STRIDE(i, n * k * C) {
    const int64_t s = i / C, c = i % C;
    x_perm[route[s] * C + c] = x[(s / k) * C + c];
  }
}

// dx[t] = Σ_j dx_perm[route[t·k + j]] (or, with weight, out[t] = Σ_j
// weight[t, j] · y_perm[...]), j ascending.
template <typename T>
__global__ void GatherSumKernel(const T* perm, const int32_t* route,
                                const T* weight, int64_t n, int64_t k,
                                int64_t C, T* out) {
  TRELLIS_GRID_STRIDE(i, n * C) {
    const int64_t t = i / C, c = i % C;
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = ToFloat(perm[route[t * k + j] * C + c]);
      sum += weight != nullptr ? ToFloat(weight[t * k + j]) * v : v;
    }
    out[i] = FromFloat<T>(sum);
  }
}

// dy_perm[route[s]] = weight[s] · dout[s / k].
template <typename T>
__global__ void ScatterScaledKernel(const T* dout, const int32_t* route,
                                    const T* weight, int64_t n, int64_t k,
                                    int64_t C, T* dy_perm) {
  TRELLIS_GRID_STRIDE(i, n * k * C) {
    const int64_t s = i / C, c = i % C;
    dy_perm[route[s] * C + c] =
        FromFloat<T>(ToFloat(weight[s]) * ToFloat(dout[(s / k) * C + c]));
  }
}

// dweight[s] = dout[s / k] · y_perm[route[s]], one warp per slot.
template <typename T>
__global__ void SlotDotKernel(const T* dout, const T* y_perm,
                              const int32_t* route, int64_t slots, int64_t k,
                              int64_t C, T* dweight) {
  const int64_t s = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (s >= slots) return;
  const T* g = dout + (s / k) * C;
  const T* y = y_perm + route[s] * C;
  float dot = 0.f;
  for (int64_t c = lane; c < C; c += 32) dot += ToFloat(g[c]) * ToFloat(y[c]);
  dot = WarpSum(dot);
  if (lane == 0) dweight[s] = FromFloat<T>(dot);
}

}  // namespace

void RouteByExpert(const int32_t* index, int64_t slots, int64_t E,
                   int32_t* route, int32_t* counts) {
  const int64_t chunks = (slots + kChunk - 1) / kChunk;
  Scratch<int32_t> chunk_counts(std::max<int64_t>(chunks, 1) * E);
  const size_t shared = sizeof(int32_t) * static_cast<size_t>(E);
  if (chunks > 0) {
    ChunkCountsKernel<<<static_cast<unsigned>(chunks), kChunk, shared>>>(
        index, slots, E, chunk_counts.get());
    TRELLIS_CUDA_CHECK_LAUNCH();
  }
  ChunkOffsetsKernel<<<1, kThreads, shared>>>(chunks, E, chunk_counts.get(),
                                              counts);
  TRELLIS_CUDA_CHECK_LAUNCH();
  if (chunks > 0) {
    PlaceKernel<<<static_cast<unsigned>(chunks), kChunk>>>(
        index, slots, E, chunk_counts.get(), route);
    TRELLIS_CUDA_CHECK_LAUNCH();
  }
}

void DispatchRows(Elem t, const void* x, const int32_t* route, int64_t n,
                  int64_t k, int64_t C, void* x_perm) {
  if (n * k * C == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchKernel<<<GridFor(n * k * C, kThreads), kThreads>>>(
        static_cast<const T*>(x), route, n, k, C, static_cast<T*>(x_perm));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void GatherRowSums(Elem t, const void* perm, const int32_t* route,
                   const void* weight, int64_t n, int64_t k, int64_t C,
                   void* out) {
  if (n * C == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    GatherSumKernel<<<GridFor(n * C, kThreads), kThreads>>>(
        static_cast<const T*>(perm), route, static_cast<const T*>(weight), n, k,
        C, static_cast<T*>(out));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void CombineRowsBackward(Elem t, const void* dout, const void* y_perm,
                         const int32_t* route, const void* weight, int64_t n,
                         int64_t k, int64_t C, void* dy_perm, void* dweight) {
  const int64_t slots = n * k;
  if (slots == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    if (C > 0) {
      ScatterScaledKernel<<<GridFor(slots * C, kThreads), kThreads>>>(
          static_cast<const T*>(dout), route, static_cast<const T*>(weight), n,
          k, C, static_cast<T*>(dy_perm));
      TRELLIS_CUDA_CHECK_LAUNCH();
    }
    const int64_t per_block = kThreads / 32;
    SlotDotKernel<<<static_cast<unsigned>((slots + per_block - 1) / per_block),
                    kThreads>>>(static_cast<const T*>(dout),
                                static_cast<const T*>(y_perm), route, slots, k,
                                C, static_cast<T*>(dweight));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
