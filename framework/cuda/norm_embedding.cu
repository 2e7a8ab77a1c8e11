// Token and position embeddings, and LayerNorm (one warp per row, also
// fused with the residual add before it; the weight gradients through the
// deterministic column sums).
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

template <typename T>
__global__ void EmbeddingForwardKernel(const int32_t* ids, int64_t N,
                                       const T* table, int64_t Vl, int64_t C,
                                       int64_t vocab_start, T* out) {
  TRELLIS_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    const int64_t row = static_cast<int64_t>(ids[n]) - vocab_start;
    out[i] = row >= 0 && row < Vl ? table[row * C + c] : FromFloat<T>(0.f);
  }
}

__device__ __forceinline__ void AtomicAddTo(float* address, float value) {
  atomicAdd(address, value);
}
__device__ __forceinline__ void AtomicAddTo(bf16* address, float value) {
  atomicAdd(address, __float2bfloat16_rn(value));
}

template <typename D, typename G>
__global__ void EmbeddingBackwardKernel(const int32_t* ids, int64_t N,
                                        const D* dout, int64_t C,
                                        int64_t vocab_start, G* dtable,
                                        int64_t Vl) {
  TRELLIS_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i % C;
    const int64_t row = static_cast<int64_t>(ids[n]) - vocab_start;
    if (row >= 0 && row < Vl)
      AtomicAddTo(dtable + row * C + c, ToFloat(dout[i]));
  }
}

template <typename T>
__global__ void AddPositionKernel(const T* wpe, T* x, int64_t B, int64_t Tn,
                                  int64_t C) {
  TRELLIS_GRID_STRIDE(i, B * Tn * C) {
    const int64_t tc = i % (Tn * C);
    x[i] = FromFloat<T>(ToFloat(x[i]) + ToFloat(wpe[tc]));
  }
}

template <typename D, typename G>
__global__ void PositionBackwardKernel(const D* dout, int64_t B, int64_t Tn,
                                       int64_t C, G* dwpe) {
  TRELLIS_GRID_STRIDE(tc, Tn * C) {
    float sum = 0.f;
    for (int64_t b = 0; b < B; ++b) sum += ToFloat(dout[b * Tn * C + tc]);
    dwpe[tc] = FromFloat<G>(ToFloat(dwpe[tc]) + sum);
  }
}

// The LayerNorm of row `row` of x (N, C) after its mean m, by one warp whose
// lane reads columns lane, lane + 32, ...: the variance from squared
// deviations, then out; lane 0 stores mean and rstd. LayerNormForwardKernel
// and AddLayerNormForwardKernel share it (and the lanes' column order), so
// they give bitwise equal results for the same row.
template <typename T>
__device__ __forceinline__ void NormalizeRow(const T* xr, float m, const T* w,
                                             const T* b, int64_t row, int64_t C,
                                             float eps, int lane, T* out,
                                             float* mean, float* rstd) {
  float squares = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = ToFloat(xr[c]) - m;
    squares += d * d;
  }
  const float s = rsqrtf(WarpSum(squares) / static_cast<float>(C) + eps);
  T* outr = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    outr[c] =
        FromFloat<T>((ToFloat(xr[c]) - m) * s * ToFloat(w[c]) + ToFloat(b[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One warp per row: mean, then the variance from squared deviations.
template <typename T>
__global__ void LayerNormForwardKernel(const T* x, const T* w, const T* b,
                                       int64_t N, int64_t C, float eps, T* out,
                                       float* mean, float* rstd) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* xr = x + row * C;
  float sum = 0.f;
  for (int64_t c = lane; c < C; c += 32) sum += ToFloat(xr[c]);
  const float m = WarpSum(sum) / static_cast<float>(C);
  NormalizeRow(xr, m, w, b, row, C, eps, lane, out, mean, rstd);
}

// One warp per row: the residual sum, rounded to T and stored, summed for
// the mean as stored; then NormalizeRow re-reads the stored sum. Each lane
// reads back only the columns it wrote itself, so no synchronization is
// needed, and sum may alias a or b (each element is read before written).
template <typename T>
__global__ void AddLayerNormForwardKernel(const T* a, const T* b, const T* w,
                                          const T* bias, int64_t N, int64_t C,
                                          float eps, T* sum, T* out,
                                          float* mean, float* rstd) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* ar = a + row * C;
  const T* br = b + row * C;
  T* sr = sum + row * C;
  float total = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const T s = FromFloat<T>(ToFloat(ar[c]) + ToFloat(br[c]));
    sr[c] = s;
    total += ToFloat(s);
  }
  const float m = WarpSum(total) / static_cast<float>(C);
  NormalizeRow(sr, m, w, bias, row, C, eps, lane, out, mean, rstd);
}

// One warp per row, each lane taking packs of P columns (16 bytes when
// every row is 16-byte aligned, else P = 1); the tail of a row past its
// last whole pack one column at a time.
template <int P, typename T>
__global__ void LayerNormBackwardInputKernel(const T* dout, const T* x,
                                             const T* w, const float* mean,
                                             const float* rstd, int64_t N,
                                             int64_t C, const T* base, T* dx) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* dr = dout + row * C;
  const T* xr = x + row * C;
  const float m = mean[row], s = rstd[row];
  const int64_t packs = C / P, tail = packs * P;
  float sum_g = 0.f, sum_gx = 0.f;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, P> d = LoadPack<P>(dr + p * P), xs = LoadPack<P>(xr + p * P);
    const Pack<T, P> ws = LoadPack<P>(w + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float g = ToFloat(d.v[k]) * ToFloat(ws.v[k]);
      sum_g += g;
      sum_gx += g * (ToFloat(xs.v[k]) - m) * s;
    }
  }
  for (int64_t c = tail + lane; c < C; c += 32) {
    const float g = ToFloat(dr[c]) * ToFloat(w[c]);
    sum_g += g;
    sum_gx += g * (ToFloat(xr[c]) - m) * s;
  }
  const float g_mean = WarpSum(sum_g) / static_cast<float>(C);
  const float gx_mean = WarpSum(sum_gx) / static_cast<float>(C);
  const T* br = base + row * C;
  T* dxr = dx + row * C;
  const auto grad = [&](float d, float xv, float wv, float b) {
    const float xhat = (xv - m) * s;
    return FromFloat<T>(b + s * (d * wv - g_mean - xhat * gx_mean));
  };
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, P> d = LoadPack<P>(dr + p * P), xs = LoadPack<P>(xr + p * P);
    const Pack<T, P> ws = LoadPack<P>(w + p * P), bs = LoadPack<P>(br + p * P);
    Pack<T, P> out;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      out.v[k] = grad(ToFloat(d.v[k]), ToFloat(xs.v[k]), ToFloat(ws.v[k]),
                      ToFloat(bs.v[k]));
    }
    StorePack<P>(dxr + p * P, out);
  }
  for (int64_t c = tail + lane; c < C; c += 32) {
    dxr[c] =
        grad(ToFloat(dr[c]), ToFloat(xr[c]), ToFloat(w[c]), ToFloat(br[c]));
  }
}

// Two terms per element: dout · xhat (for dw) and dout (for db).
template <typename T>
struct LayerNormWeightTerms {
  const T* dout;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* acc) const {
    const float d = ToFloat(dout[r * C + c]);
    acc[0] += d * (ToFloat(x[r * C + c]) - mean[r]) * rstd[r];
    acc[1] += d;
  }
};

unsigned RowBlocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void EmbeddingForward(Elem t, const int32_t* ids, int64_t N, const void* table,
                      int64_t Vl, int64_t C, int64_t vocab_start, void* out) {
  if (N * C == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    EmbeddingForwardKernel<<<GridFor(N * C, kThreads), kThreads>>>(
        ids, N, static_cast<const T*>(table), Vl, C, vocab_start,
        static_cast<T*>(out));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void EmbeddingBackward(Elem dout_type, const int32_t* ids, int64_t N,
                       const void* dout, int64_t C, int64_t vocab_start,
                       Elem table_type, void* dtable, int64_t Vl) {
  if (N * C == 0) return;
  DispatchElem(dout_type, [&](auto d) {
    using D = decltype(d);
    DispatchElem(table_type, [&](auto g) {
      using G = decltype(g);
      EmbeddingBackwardKernel<<<GridFor(N * C, kThreads), kThreads>>>(
          ids, N, static_cast<const D*>(dout), C, vocab_start,
          static_cast<G*>(dtable), Vl);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AddPositionEmbedding(Elem t, const void* wpe, void* x, int64_t B,
                          int64_t T, int64_t C) {
  if (B * T * C == 0) return;
  DispatchElem(t, [&](auto tag) {
    using E = decltype(tag);
    AddPositionKernel<<<GridFor(B * T * C, kThreads), kThreads>>>(
        static_cast<const E*>(wpe), static_cast<E*>(x), B, T, C);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void PositionEmbeddingBackward(Elem dout_type, const void* dout, int64_t B,
                               int64_t T, int64_t C, Elem dwpe_type,
                               void* dwpe) {
  if (T * C == 0) return;
  DispatchElem(dout_type, [&](auto d) {
    using D = decltype(d);
    DispatchElem(dwpe_type, [&](auto g) {
      using G = decltype(g);
      PositionBackwardKernel<<<GridFor(T * C, kThreads), kThreads>>>(
          static_cast<const D*>(dout), B, T, C, static_cast<G*>(dwpe));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void LayerNormForward(Elem t, const void* x, const void* w, const void* b,
                      int64_t N, int64_t C, float eps, void* out, float* mean,
                      float* rstd) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    LayerNormForwardKernel<<<RowBlocks(N), kThreads>>>(
        static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), N, C, eps, static_cast<T*>(out), mean, rstd);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AddLayerNormForward(Elem t, const void* a, const void* b, const void* w,
                         const void* bias, int64_t N, int64_t C, float eps,
                         void* sum, void* out, float* mean, float* rstd) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    AddLayerNormForwardKernel<<<RowBlocks(N), kThreads>>>(
        static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<const T*>(w), static_cast<const T*>(bias), N, C, eps,
        static_cast<T*>(sum), static_cast<T*>(out), mean, rstd);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void LayerNormBackwardInput(Elem t, const void* dout, const void* x,
                            const void* w, const float* mean, const float* rstd,
                            int64_t N, int64_t C, const void* base, void* dx) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({dout, x, w, base, dx}, C, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      LayerNormBackwardInputKernel<P><<<RowBlocks(N), kThreads>>>(
          static_cast<const T*>(dout), static_cast<const T*>(x),
          static_cast<const T*>(w), mean, rstd, N, C,
          static_cast<const T*>(base), static_cast<T*>(dx));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void LayerNormBackwardWeight(Elem t, const void* dout, const void* x,
                             const float* mean, const float* rstd, int64_t N,
                             int64_t C, Elem w_type, void* dw, void* db) {
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchElem(w_type, [&](auto g) {
      using G = decltype(g);
      const LayerNormWeightTerms<T> terms{
          static_cast<const T*>(dout), static_cast<const T*>(x), mean, rstd, C};
      LaunchColumnSums<2>(terms, N, C, static_cast<G*>(dw),
                          static_cast<G*>(db));
    });
  });
}

}  // namespace cuda_launch
}  // namespace trellis
