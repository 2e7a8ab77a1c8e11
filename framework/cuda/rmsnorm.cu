// RMSNorm (one warp per row, also fused with the residual add before it;
// the weight gradient through the deterministic column sums).
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// The RMSNorm of row `row` of x (N, C) by one warp whose lane reads columns
// lane, lane + 32, ...; lane 0 stores rstd. The plain and the fused forward
// share it (and the lanes' column order), so they agree bit for bit.
template <typename T>
__device__ __forceinline__ void RmsNormalizeRow(const T* xr, const T* w,
                                                int64_t row, int64_t C,
                                                float eps, int lane, T* out,
                                                float* rstd) {
  float squares = 0.f;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = ToFloat(xr[c]);
    squares += v * v;
  }
  const float s = rsqrtf(WarpSum(squares) / static_cast<float>(C) + eps);
  T* outr = out + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    outr[c] = FromFloat<T>(ToFloat(xr[c]) * s * ToFloat(w[c]));
  }
  if (lane == 0) rstd[row] = s;
}

template <typename T>
__global__ void RmsNormForwardKernel(const T* x, const T* w, int64_t N,
                                     int64_t C, float eps, T* out,
                                     float* rstd) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (row >= N) return;
  RmsNormalizeRow(x + row * C, w, row, C, eps, threadIdx.x % 32, out, rstd);
}

// The residual sum, rounded to T and stored, then RmsNormalizeRow re-reads
// the stored sum. Each lane reads back only the columns it wrote, so no
// synchronization is needed, and sum may alias a or b.
template <typename T>
__global__ void AddRmsNormForwardKernel(const T* a, const T* b, const T* w,
                                        int64_t N, int64_t C, float eps, T* sum,
                                        T* out, float* rstd) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* ar = a + row * C;
  const T* br = b + row * C;
  T* sr = sum + row * C;
  for (int64_t c = lane; c < C; c += 32) {
    sr[c] = FromFloat<T>(ToFloat(ar[c]) + ToFloat(br[c]));
  }
  RmsNormalizeRow(sr, w, row, C, eps, lane, out, rstd);
}

// One warp per row, each lane taking packs of P columns (16 bytes when every
// row is 16-byte aligned, else P = 1); the tail one column at a time.
template <int P, typename T>
__global__ void RmsNormBackwardInputKernel(const T* dout, const T* x,
                                           const T* w, const float* rstd,
                                           int64_t N, int64_t C, const T* base,
                                           T* dx) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* dr = dout + row * C;
  const T* xr = x + row * C;
  const float s = rstd[row];
  const int64_t packs = C / P, tail = packs * P;
  float sum_gx = 0.f;
  for (int64_t p = lane; p < packs; p += 32) {
    const Pack<T, P> d = LoadPack<P>(dr + p * P), xs = LoadPack<P>(xr + p * P);
    const Pack<T, P> ws = LoadPack<P>(w + p * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      sum_gx += ToFloat(d.v[k]) * ToFloat(ws.v[k]) * ToFloat(xs.v[k]) * s;
    }
  }
  for (int64_t c = tail + lane; c < C; c += 32) {
    sum_gx += ToFloat(dr[c]) * ToFloat(w[c]) * ToFloat(xr[c]) * s;
  }
  const float gx_mean = WarpSum(sum_gx) / static_cast<float>(C);
  const T* br = base + row * C;
  T* dxr = dx + row * C;
  const auto grad = [&](float d, float xv, float wv, float b) {
    return FromFloat<T>(b + s * (d * wv - xv * s * gx_mean));
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

// One term per element: dout · x · rstd.
template <typename T>
struct RmsNormWeightTerms {
  const T* dout;
  const T* x;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float* acc) const {
    acc[0] += ToFloat(dout[r * C + c]) * ToFloat(x[r * C + c]) * rstd[r];
  }
};

unsigned RowBlocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void RmsNormForward(Elem t, const void* x, const void* w, int64_t N, int64_t C,
                    float eps, void* out, float* rstd) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    RmsNormForwardKernel<<<RowBlocks(N), kThreads>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), N, C, eps,
        static_cast<T*>(out), rstd);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AddRmsNormForward(Elem t, const void* a, const void* b, const void* w,
                       int64_t N, int64_t C, float eps, void* sum, void* out,
                       float* rstd) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    AddRmsNormForwardKernel<<<RowBlocks(N), kThreads>>>(
        static_cast<const T*>(a), static_cast<const T*>(b),
        static_cast<const T*>(w), N, C, eps, static_cast<T*>(sum),
        static_cast<T*>(out), rstd);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void RmsNormBackwardInput(Elem t, const void* dout, const void* x,
                          const void* w, const float* rstd, int64_t N,
                          int64_t C, const void* base, void* dx) {
  if (N == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithRowPack<T>({dout, x, w, base, dx}, C, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      RmsNormBackwardInputKernel<P><<<RowBlocks(N), kThreads>>>(
          static_cast<const T*>(dout), static_cast<const T*>(x),
          static_cast<const T*>(w), rstd, N, C, static_cast<const T*>(base),
          static_cast<T*>(dx));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void RmsNormBackwardWeight(Elem t, const void* dout, const void* x,
                           const float* rstd, int64_t N, int64_t C, Elem w_type,
                           void* dw) {
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchElem(w_type, [&](auto g) {
      using G = decltype(g);
      const RmsNormWeightTerms<T> terms{static_cast<const T*>(dout),
                                        static_cast<const T*>(x), rstd, C};
      LaunchColumnSums<1>(terms, N, C, static_cast<G*>(dw),
                          static_cast<G*>(nullptr));
    });
  });
}

}  // namespace cuda_launch
}  // namespace trellis
