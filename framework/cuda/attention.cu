// Causal attention that never stores a T×T matrix (flash-attention style).
//
// Forward: a block takes kRows query rows of one (batch, head), a thread one
// row; it walks the key/value tiles up to the block's last row with an
// online softmax (running max m, running sum l, output rescaled when m
// grows) and saves lse = m + log(l) per row.
//
// Backward recomputes p = exp(scale·q·k - lse) instead of reading stored
// probabilities, in two kernels with no atomics (so results are
// reproducible): one thread per query row for dQ, one thread per key row for
// dK and dV. With Di = dO_i · O_i and dS = P ⊙ (dP - Di):
//   dQ_i = scale · Σ_j dS_ij K_j,  dK_j = scale · Σ_i dS_ij Q_i,
//   dV_j = Σ_i P_ij dO_i.
// Each pair (i, j) costs 7·D multiply-adds across the two kernels against
// the 5·D of a fused kernel with atomic dQ updates.
//
// Grouped-query attention: query head h reads key/value head h / (H / Hkv);
// the dK/dV kernel takes one key/value head per block row and walks the
// query heads of its group in order, so its sums stay in registers (with
// Hkv = H the same sums in the same order as multi-head attention).
//
// Head widths are padded up to kD ∈ {32, 64, 128} (zeros beyond D), so that
// per-thread rows live in registers; arithmetic is float32 for float32 and
// bfloat16 inputs alike.
//
// These SIMT kernels run on the CUDA cores. cuda_launch::AttentionForward
// and AttentionBackward send bfloat16 calls that the tensor-core kernels take
// (attention_mma.cu: head width 32, 64 or 128 on compute capability 8.0 or
// newer) there instead; SimtAttentionForward and SimtAttentionBackward
// (attention_simt.h) keep every call here, so that the paths can be compared
// on one GPU. Which entry runs is chosen in attention_select.cc.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "framework/cuda/attention_mma.cuh"
#include "framework/cuda/attention_simt.h"
#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kRows = 64;     // query rows per block: forward and dQ
constexpr int kKeyTile = 32;  // keys per shared-memory tile: forward and dQ
constexpr int kKeys = 32;     // key rows per block: dK/dV

// Where row t of batch b, query head h lives: q at Qkv(), its key head at
// Key() and value head Hkv·D further; out/dout at Out(); lse at Lse(). A qkv
// row is W = (H + 2·Hkv)·D wide; kv head g's key at C + g·D.
struct Layout {
  int64_t T, H, D, C, Hkv, W;
  __device__ int64_t Qkv(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * W + h * D;
  }
  __device__ int64_t KvKey(int64_t b, int64_t t, int64_t g) const {
    return (b * T + t) * W + C + g * D;
  }
  __device__ int64_t Key(int64_t b, int64_t t, int64_t h) const {
    return KvKey(b, t, h / (H / Hkv));
  }
  __device__ int64_t Out(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * C + h * D;
  }
  __device__ int64_t Lse(int64_t b, int64_t t, int64_t h) const {
    return (b * H + h) * T + t;
  }
};

// Loads keys (and values) [j0, j0 + kKeyTile) of query head h's key/value
// head into shared tiles, zeros past T and past D. Called by all kRows
// threads.
template <typename T, int kD>
__device__ void LoadKeyTile(const Layout& L, const T* qkv, int64_t b, int64_t h,
                            int64_t j0, float (*ks)[kD], float (*vs)[kD]) {
  for (int idx = threadIdx.x; idx < kKeyTile * kD; idx += kRows) {
    const int jj = idx / kD, d = idx % kD;
    const int64_t j = j0 + jj;
    const bool in = j < L.T && d < L.D;
    const int64_t at = in ? L.Key(b, j, h) + d : 0;
    ks[jj][d] = in ? ToFloat(qkv[at]) : 0.f;
    vs[jj][d] = in ? ToFloat(qkv[at + L.Hkv * L.D]) : 0.f;
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(kRows)
    ForwardKernel(Layout L, float scale, const T* qkv, T* out, float* lse) {
  __shared__ float ks[kKeyTile][kD];
  __shared__ float vs[kKeyTile][kD];
  __shared__ float ss[kKeyTile][kRows];  // this tile's scores, a column each
  const int64_t b = blockIdx.y / L.H, h = blockIdx.y % L.H;
  const int64_t row0 = blockIdx.x * int64_t{kRows};
  const int64_t t = row0 + threadIdx.x;
  const bool active = t < L.T;
  float q[kD], o[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    q[d] = active && d < L.D ? ToFloat(qkv[L.Qkv(b, t, h) + d]) * scale : 0.f;
    o[d] = 0.f;
  }
  float m = -CUDART_INF_F, l = 0.f;
  const int64_t key_end = min(L.T, row0 + kRows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    __syncthreads();
    LoadKeyTile<T, kD>(L, qkv, b, h, j0, ks, vs);
    __syncthreads();
    if (!active || j0 > t) continue;  // no key of this tile is visible to t
    const int visible = static_cast<int>(min(int64_t{kKeyTile}, t - j0 + 1));
    float tile_max = -CUDART_INF_F;
#pragma unroll 2
    for (int jj = 0; jj < visible; ++jj) {
      float dot = 0.f;
#pragma unroll
      for (int d = 0; d < kD; ++d) dot += q[d] * ks[jj][d];
      ss[jj][threadIdx.x] = dot;
      tile_max = fmaxf(tile_max, dot);
    }
    // Key j0 <= t is visible, so m_new is finite; exp(-inf) = 0 at start.
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);
    l *= correction;
#pragma unroll
    for (int d = 0; d < kD; ++d) o[d] *= correction;
#pragma unroll 2
    for (int jj = 0; jj < visible; ++jj) {
      const float p = expf(ss[jj][threadIdx.x] - m_new);
      l += p;
#pragma unroll
      for (int d = 0; d < kD; ++d) o[d] += p * vs[jj][d];
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = 1.f / l;
  T* o_row = out + L.Out(b, t, h);
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < L.D) o_row[d] = FromFloat<T>(o[d] * inv_l);
  }
  lse[L.Lse(b, t, h)] = m + logf(l);
}

// dQ: one thread per query row t, keys [0, t].
template <typename T, int kD>
__global__ void __launch_bounds__(kRows)
    BackwardQueryKernel(Layout L, float scale, const T* dout, const T* qkv,
                        const T* out, const float* lse, T* dqkv) {
  __shared__ float ks[kKeyTile][kD];
  __shared__ float vs[kKeyTile][kD];
  const int64_t b = blockIdx.y / L.H, h = blockIdx.y % L.H;
  const int64_t row0 = blockIdx.x * int64_t{kRows};
  const int64_t t = row0 + threadIdx.x;
  const bool active = t < L.T;
  float q[kD], g[kD], dq[kD];
  float di = 0.f;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    const bool in = active && d < L.D;
    q[d] = in ? ToFloat(qkv[L.Qkv(b, t, h) + d]) : 0.f;
    g[d] = in ? ToFloat(dout[L.Out(b, t, h) + d]) : 0.f;
    di += in ? g[d] * ToFloat(out[L.Out(b, t, h) + d]) : 0.f;
    dq[d] = 0.f;
  }
  const float row_lse = active ? lse[L.Lse(b, t, h)] : 0.f;
  const int64_t key_end = min(L.T, row0 + kRows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    __syncthreads();
    LoadKeyTile<T, kD>(L, qkv, b, h, j0, ks, vs);
    __syncthreads();
    if (!active || j0 > t) continue;
    const int visible = static_cast<int>(min(int64_t{kKeyTile}, t - j0 + 1));
#pragma unroll 1
    for (int jj = 0; jj < visible; ++jj) {
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        s += q[d] * ks[jj][d];
        dp += g[d] * vs[jj][d];
      }
      const float p = expf(s * scale - row_lse);
      const float ds = p * (dp - di);
#pragma unroll
      for (int d = 0; d < kD; ++d) dq[d] += ds * ks[jj][d];
    }
  }
  if (!active) return;
  T* dq_row = dqkv + L.Qkv(b, t, h);
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < L.D) dq_row[d] = FromFloat<T>(ToFloat(dq_row[d]) + scale * dq[d]);
  }
}

// dK, dV: one thread per key row j of key/value head g, queries [j, T) of
// each query head of g's group in shared tiles. The thread's own k and v
// rows sit in padded shared rows (no bank conflicts).
template <typename T, int kD>
__global__ void __launch_bounds__(kKeys)
    BackwardKeyKernel(Layout L, float scale, const T* dout, const T* qkv,
                      const T* out, const float* lse, T* dqkv) {
  constexpr int kQueryTile = 1024 / kD;
  static_assert(kQueryTile <= kKeys, "Di is computed one row per thread");
  __shared__ float k_own[kKeys][kD + 1];
  __shared__ float v_own[kKeys][kD + 1];
  __shared__ float qs[kQueryTile][kD];
  __shared__ float gs[kQueryTile][kD];
  __shared__ float lse_s[kQueryTile];
  __shared__ float di_s[kQueryTile];
  const int64_t b = blockIdx.y / L.Hkv, g = blockIdx.y % L.Hkv;
  const int64_t key0 = blockIdx.x * int64_t{kKeys};
  const int64_t j = key0 + threadIdx.x;
  const bool active = j < L.T;
  for (int idx = threadIdx.x; idx < kKeys * kD; idx += kKeys) {
    const int jj = idx / kD, d = idx % kD;
    const bool in = key0 + jj < L.T && d < L.D;
    const int64_t at = in ? L.KvKey(b, key0 + jj, g) + d : 0;
    k_own[jj][d] = in ? ToFloat(qkv[at]) : 0.f;
    v_own[jj][d] = in ? ToFloat(qkv[at + L.Hkv * L.D]) : 0.f;
  }
  float dk[kD], dv[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) dk[d] = dv[d] = 0.f;
  const int64_t group = L.H / L.Hkv;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = key0; i0 < L.T; i0 += kQueryTile) {
      __syncthreads();
      for (int idx = threadIdx.x; idx < kQueryTile * kD; idx += kKeys) {
        const int ii = idx / kD, d = idx % kD;
        const bool in = i0 + ii < L.T && d < L.D;
        qs[ii][d] = in ? ToFloat(qkv[L.Qkv(b, i0 + ii, h) + d]) : 0.f;
        gs[ii][d] = in ? ToFloat(dout[L.Out(b, i0 + ii, h) + d]) : 0.f;
      }
      if (threadIdx.x < kQueryTile) {
        const int64_t i = i0 + threadIdx.x;
        float di = 0.f;
        if (i < L.T) {
          const int64_t at = L.Out(b, i, h);
          for (int64_t d = 0; d < L.D; ++d) {
            di += ToFloat(dout[at + d]) * ToFloat(out[at + d]);
          }
        }
        di_s[threadIdx.x] = di;
        lse_s[threadIdx.x] = i < L.T ? lse[L.Lse(b, i, h)] : 0.f;
      }
      __syncthreads();
      if (!active) continue;
      const int rows = static_cast<int>(min(int64_t{kQueryTile}, L.T - i0));
#pragma unroll 1
      for (int ii = 0; ii < rows; ++ii) {
        if (i0 + ii < j) continue;  // query i sees key j only when i >= j
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int d = 0; d < kD; ++d) {
          s += qs[ii][d] * k_own[threadIdx.x][d];
          dp += gs[ii][d] * v_own[threadIdx.x][d];
        }
        const float p = expf(s * scale - lse_s[ii]);
        const float ds = p * (dp - di_s[ii]);
#pragma unroll
        for (int d = 0; d < kD; ++d) {
          dv[d] += p * gs[ii][d];
          dk[d] += ds * qs[ii][d];
        }
      }
    }
  }
  if (!active) return;
  T* dk_row = dqkv + L.KvKey(b, j, g);
  T* dv_row = dk_row + L.Hkv * L.D;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < L.D) {
      dk_row[d] = FromFloat<T>(ToFloat(dk_row[d]) + scale * dk[d]);
      dv_row[d] = FromFloat<T>(ToFloat(dv_row[d]) + dv[d]);
    }
  }
}

Layout MakeLayout(const AttentionDims& d) {
  return Layout{d.T, d.H, d.D, d.H * d.D, d.Hkv, (d.H + 2 * d.Hkv) * d.D};
}

float Scale(const AttentionDims& d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.D)));
}

// Blocks of rows_per_block rows for each of the B · heads (batch, head).
dim3 Grid(const AttentionDims& d, int rows_per_block, int64_t heads) {
  return dim3(
      static_cast<unsigned>((d.T + rows_per_block - 1) / rows_per_block),
      static_cast<unsigned>(d.B * heads));
}

// Calls fn(std::integral_constant<int, kD>{}) for the padded head width.
template <typename Fn>
void DispatchHeadDim(int64_t D, Fn&& fn) {
  if (D <= 32) {
    fn(std::integral_constant<int, 32>{});
  } else if (D <= 64) {
    fn(std::integral_constant<int, 64>{});
  } else {
    fn(std::integral_constant<int, 128>{});
  }
}

}  // namespace

void SimtAttentionForward(Elem t, const AttentionDims& dims, const void* qkv,
                          void* out, float* lse) {
  const AttentionDims d = WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchHeadDim(d.D, [&](auto width) {
      constexpr int kD = decltype(width)::value;
      ForwardKernel<T, kD><<<Grid(d, kRows, d.H), kRows>>>(
          MakeLayout(d), Scale(d), static_cast<const T*>(qkv),
          static_cast<T*>(out), lse);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void SimtAttentionBackward(Elem t, const AttentionDims& dims, const void* dout,
                           const void* qkv, const void* out, const float* lse,
                           void* dqkv) {
  const AttentionDims d = WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    DispatchHeadDim(d.D, [&](auto width) {
      constexpr int kD = decltype(width)::value;
      const auto* g = static_cast<const T*>(dout);
      const auto* x = static_cast<const T*>(qkv);
      const auto* o = static_cast<const T*>(out);
      BackwardQueryKernel<T, kD><<<Grid(d, kRows, d.H), kRows>>>(
          MakeLayout(d), Scale(d), g, x, o, lse, static_cast<T*>(dqkv));
      TRELLIS_CUDA_CHECK_LAUNCH();
      BackwardKeyKernel<T, kD><<<Grid(d, kKeys, d.Hkv), kKeys>>>(
          MakeLayout(d), Scale(d), g, x, o, lse, static_cast<T*>(dqkv));
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AttentionForward(Elem t, const AttentionDims& d, const void* qkv,
                      void* out, float* lse) {
  if (d.B * d.H * d.T == 0) return;
  if (MmaAttentionSupported(t, d, {qkv, out})) {
    MmaAttentionForward(d, qkv, out, lse);
  } else {
    SimtAttentionForward(t, d, qkv, out, lse);
  }
}

void AttentionBackward(Elem t, const AttentionDims& d, const void* dout,
                       const void* qkv, const void* out, const float* lse,
                       void* dqkv) {
  if (d.B * d.H * d.T == 0) return;
  if (MmaAttentionSupported(t, d, {dout, qkv, out, dqkv})) {
    MmaAttentionBackward(d, dout, qkv, out, lse, dqkv);
  } else {
    SimtAttentionBackward(t, d, dout, qkv, out, lse, dqkv);
  }
}

}  // namespace cuda_launch
}  // namespace trellis
