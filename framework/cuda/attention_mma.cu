// Causal attention on tensor cores (bfloat16 inputs, float32 accumulation),
// FlashAttention-2 style: no T×T matrix is stored, the row log-sum-exps are
// saved and backward recomputes the probabilities from them.
//
// Tiles: a block of kWarps = 4 warps takes kTile = 64 rows (query rows in
// forward and dQ, key rows in dK/dV) of one (batch, head); each warp owns 16
// of them, so everything but the shared K/V (or Q/dO) tiles is private to a
// warp and needs only __syncwarp. Products run as 16×16×16 nvcuda::wmma
// bfloat16 fragments with float accumulators; the softmax and every row
// statistic are float32. Operands staged in shared memory:
//
// Forward, per 64-row query tile, over key tiles up to the diagonal:
//   S = Q·Kᵀ (float, shared) → scale, causal mask, online softmax (running
//   max m, running sum l of the float32 probabilities) → P rounded to bf16 →
//   O (float, shared) = O·exp(m_old - m_new) + P·V; at the end O/l goes out
//   as bf16 and lse = m + log(l).
// Backward, no atomics (bitwise reproducible), three kernels:
//   Di = dO_i · O_i per row (float32);
//   per 64-key tile, over query tiles from the diagonal: recompute Sᵀ = K·Qᵀ
//   and dPᵀ = V·dOᵀ, P = exp(scale·S - lse), dS = P ⊙ (dP - Di), then
//   dV += Pᵀ·dO and dK += dSᵀ·Q (P and dS rounded to bf16);
//   per 64-query tile, over key tiles up to the diagonal: recompute S and
//   dP, then dQ += dS·K.
// dQ and dK take the factor scale at the end. Gradients are added onto dqkv.
//
// Grouped-query attention (Hkv < H key/value heads): query head h reads
// key/value head h / (H / Hkv); the dK/dV kernel takes one key/value head
// per block row and walks the query heads of its group in order, keeping
// the sums in its accumulator fragments (with Hkv = H, the multi-head
// arithmetic unchanged).
//
// Rounding, against the SIMT kernels (float32 throughout): P is rounded to
// bf16 before P·V and P, dS before the backward products (relative 2^-9
// each); S, dP, O and the gradients accumulate in float32.
//
// Causality: a query tile's first key tile starts at key 0, which every row
// sees, so the running max is finite after it; still, a row whose max is
// -inf would use 0 as its reference so that nothing becomes NaN. Rows and
// keys at or past T are loaded as zeros and masked out, and nothing is
// written for them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "framework/cuda/attention_mma.cuh"
#include "framework/cuda/attention_mma_tiles.cuh"
#include "framework/cuda/cuda_check.h"
#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

using namespace attention_mma;  // the tiles and products they share

#if TRELLIS_ATTENTION_MMA
// One online-softmax step of row t (the lane's half of it, r in the warp's
// slices) over the key tile at j0, whose scores are in s_w: keys j <= t,
// j < T are visible. Writes the tile's probabilities to p_w as bf16,
// advances the running max m and sum l, and rescales the row's output
// accumulator in o_w by exp(m_old - m_new).
template <int kD>
__device__ __forceinline__ void OnlineSoftmaxStep(const float* s_w, bf16* p_w,
                                                  float* o_w, int r, int half,
                                                  int64_t j0, int64_t t,
                                                  int64_t T, float scale,
                                                  float& m, float& l) {
  using S = Strides<kD>;
  float sv[kTile / 2];
  float tile_max = -CUDART_INF_F;
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) {
    const int c = 2 * i + half;
    const int64_t j = j0 + c;
    sv[i] = j <= t && j < T ? s_w[r * S::kScore + c] * scale : -CUDART_INF_F;
    tile_max = fmaxf(tile_max, sv[i]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  const float m_new = fmaxf(m, tile_max);
  const float ref = m_new == -CUDART_INF_F ? 0.f : m_new;
  const float correction = expf(m - ref);  // 0 while m is -inf
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) {
    const float p = expf(sv[i] - ref);
    p_w[r * S::kProb + 2 * i + half] = FromFloat<bf16>(p);
    sum += p;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  l = l * correction + sum;
  m = m_new;
  for (int c = half; c < kD; c += 2) o_w[r * S::kAcc + c] *= correction;
}

// O += P·V for the warp's rows, with O round-tripping through shared memory
// (o_w) so that the softmax step can rescale its rows.
template <int kD>
__device__ __forceinline__ void AccumulateProbsTimesValues(const bf16* p_w,
                                                           const bf16* vs,
                                                           float* o_w) {
  using S = Strides<kD>;
  FragAcc acc[kD / kFrag];
#pragma unroll
  for (int n = 0; n < kD / kFrag; ++n) {
    wmma::load_matrix_sync(acc[n], o_w + n * kFrag, S::kAcc,
                           wmma::mem_row_major);
  }
  WarpProductAccumulate<kD>(p_w, S::kProb, vs, S::kHalf, acc);
#pragma unroll
  for (int n = 0; n < kD / kFrag; ++n) {
    wmma::store_matrix_sync(o_w + n * kFrag, acc[n], S::kAcc,
                            wmma::mem_row_major);
  }
}
#endif  // TRELLIS_ATTENTION_MMA

template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaForwardKernel(AttentionDims d, float scale, const bf16* qkv, bf16* out,
                     float* lse) {
#if TRELLIS_ATTENTION_MMA
  using S = Strides<kD>;
  using B = Bytes<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  SharedCarver carve(smem);
  bf16* qs = carve.Take<bf16>(B::kHalfTile);
  bf16* ks = carve.Take<bf16>(B::kHalfTile);
  bf16* vs = carve.Take<bf16>(B::kHalfTile);
  float* ss = carve.Take<float>(B::kScoreTile);
  bf16* ps = carve.Take<bf16>(B::kProbTile);
  float* os = carve.Take<float>(B::kAccTile);

  const Head hd(d, blockIdx.y / d.H, blockIdx.y % d.H);
  const int64_t row0 = ReversedTile() * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int wrow = warp * kRowsPerWarp;  // the warp's first row in the tile
  const int64_t t = row0 + wrow + r;     // this lane's query row
  // The warp's slices of the per-row regions.
  float* s_w = ss + wrow * S::kScore;
  bf16* p_w = ps + wrow * S::kProb;
  float* o_w = os + wrow * S::kAcc;

  LoadTile<kD>(qkv + hd.q, hd.qkv_stride, row0, hd.T, qs);
  for (int c = half; c < kD; c += 2) o_w[r * S::kAcc + c] = 0.f;
  float m = -CUDART_INF_F, l = 0.f;
  // Key tiles 0 .. row0: the last is the diagonal tile (row0 < T).
  for (int64_t j0 = 0; j0 <= row0; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous K, V
    LoadTile<kD>(qkv + hd.k, hd.qkv_stride, j0, hd.T, ks);
    LoadTile<kD>(qkv + hd.v, hd.qkv_stride, j0, hd.T, vs);
    __syncthreads();
    WarpProductTransposed<kD>(qs + wrow * S::kHalf, S::kHalf, ks, S::kHalf, s_w,
                              S::kScore);
    __syncwarp();

    OnlineSoftmaxStep<kD>(s_w, p_w, o_w, r, half, j0, t, hd.T, scale, m, l);
    __syncwarp();
    AccumulateProbsTimesValues<kD>(p_w, vs, o_w);
    __syncwarp();
  }

  if (t < hd.T) {
    const float inv_l = 1.f / l;
    bf16* o_row = out + hd.o + t * hd.C;
    for (int c = half; c < kD; c += 2) {
      o_row[c] = FromFloat<bf16>(o_w[r * S::kAcc + c] * inv_l);
    }
    if (half == 0) lse[hd.stat + t] = m + logf(l);
  }
#else
  __trap();
#endif
}

// di (B, H, T) = Σ_d dout·out per row, one warp per (b, t, h) row; row
// (b·T + t)·H + h starts at element row·D of out and dout.
__global__ void RowDotKernel(AttentionDims d, const bf16* dout, const bf16* out,
                             float* di) {
  const int64_t rows = d.B * d.T * d.H;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
       row < rows; row += warps) {
    float sum = 0.f;
    for (int64_t c = lane; c < d.D; c += 32) {
      sum += ToFloat(dout[row * d.D + c]) * ToFloat(out[row * d.D + c]);
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      const int64_t h = row % d.H, bt = row / d.H;
      const int64_t b = bt / d.T, t = bt % d.T;
      di[(b * d.H + h) * d.T + t] = sum;
    }
  }
}

#if TRELLIS_ATTENTION_MMA
// The dK/dV kernel's dynamic shared memory: its K and V tiles, the Q and dO
// tiles of the query tile at hand (whose space `stage` takes after the
// loop), the warps' rows of Sᵀ, dPᵀ, Pᵀ and dSᵀ, and the query tile's lse
// and Di.
template <int kD>
struct KeyValueShared {
  bf16 *ks, *vs, *qs, *gs;
  float* stage;  // after the loop only
  float *sts, *dpts;
  bf16 *pts, *dsts;
  float *lse_s, *di_s;

  __device__ explicit KeyValueShared(unsigned char* smem) {
    using B = Bytes<kD>;
    SharedCarver carve(smem);
    ks = carve.Take<bf16>(B::kHalfTile);
    vs = carve.Take<bf16>(B::kHalfTile);
    unsigned char* pair = carve.Take<unsigned char>(B::kQueryPair);
    qs = reinterpret_cast<bf16*>(pair);
    gs = reinterpret_cast<bf16*>(pair + B::kHalfTile);
    stage = reinterpret_cast<float*>(pair);
    sts = carve.Take<float>(B::kScoreTile);
    dpts = carve.Take<float>(B::kScoreTile);
    pts = carve.Take<bf16>(B::kProbTile);
    dsts = carve.Take<bf16>(B::kProbTile);
    lse_s = carve.Take<float>(B::kRowVector);
    di_s = carve.Take<float>(B::kRowVector);
  }
};

// Stages query tile i0 of head hd for the dK/dV kernel: its Q and dO rows in
// qs and gs, their lse and Di in lse_s and di_s (zeros past T). Called by
// every thread.
template <int kD>
__device__ __forceinline__ void LoadQueryTile(const Head& hd, int64_t i0,
                                              const bf16* dout, const bf16* qkv,
                                              const float* lse, const float* di,
                                              bf16* qs, bf16* gs, float* lse_s,
                                              float* di_s) {
  LoadTile<kD>(qkv + hd.q, hd.qkv_stride, i0, hd.T, qs);
  LoadTile<kD>(dout + hd.o, hd.C, i0, hd.T, gs);
  if (threadIdx.x < kTile) {
    const int64_t i = i0 + threadIdx.x;
    lse_s[threadIdx.x] = i < hd.T ? lse[hd.stat + i] : 0.f;
    di_s[threadIdx.x] = i < hd.T ? di[hd.stat + i] : 0.f;
  }
}

#endif  // TRELLIS_ATTENTION_MMA

// dK, dV of one 64-key tile of key/value head g, over the query tiles from
// the diagonal on of each query head of g's group.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaBackwardKeyKernel(AttentionDims d, float scale, const bf16* dout,
                         const bf16* qkv, const float* lse, const float* di,
                         bf16* dqkv) {
#if TRELLIS_ATTENTION_MMA
  using S = Strides<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  const KeyValueShared<kD> sh(smem);

  const int64_t b = blockIdx.y / d.Hkv, group = d.H / d.Hkv;
  const int64_t h0 = blockIdx.y % d.Hkv * group;  // the group's first head
  const Head kv(d, b, h0);
  // Blocks in order: the first key tiles see the most queries.
  const int64_t key0 = blockIdx.x * int64_t{kTile};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int wrow = warp * kRowsPerWarp;
  const int64_t j = key0 + wrow + r;  // this lane's key row
  float* st_w = sh.sts + wrow * S::kScore;
  float* dpt_w = sh.dpts + wrow * S::kScore;
  bf16* pt_w = sh.pts + wrow * S::kProb;
  bf16* dst_w = sh.dsts + wrow * S::kProb;

  LoadTile<kD>(qkv + kv.k, kv.qkv_stride, key0, kv.T, sh.ks);
  LoadTile<kD>(qkv + kv.v, kv.qkv_stride, key0, kv.T, sh.vs);
  FragAcc dk[kD / kFrag], dv[kD / kFrag];
#pragma unroll
  for (int n = 0; n < kD / kFrag; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  for (int64_t h = h0; h < h0 + group; ++h) {
    const Head hd(d, b, h);
    for (int64_t i0 = key0; i0 < hd.T; i0 += kTile) {
      __syncthreads();  // every warp is done with the previous Q, dO
      LoadQueryTile<kD>(hd, i0, dout, qkv, lse, di, sh.qs, sh.gs, sh.lse_s,
                        sh.di_s);
      __syncthreads();
      // Sᵀ (16 keys, kTile queries) = K_w·Qᵀ; dPᵀ = V_w·dOᵀ.
      WarpProductTransposed<kD>(sh.ks + wrow * S::kHalf, S::kHalf, sh.qs,
                                S::kHalf, st_w, S::kScore);
      WarpProductTransposed<kD>(sh.vs + wrow * S::kHalf, S::kHalf, sh.gs,
                                S::kHalf, dpt_w, S::kScore);
      __syncwarp();
      // Query i sees key j when j <= i; both must be real rows.
#pragma unroll 4
      for (int c = half; c < kTile; c += 2) {
        const int64_t i = i0 + c;
        const bool visible = j <= i && i < hd.T && j < hd.T;
        const float p =
            visible ? expf(st_w[r * S::kScore + c] * scale - sh.lse_s[c]) : 0.f;
        const float ds =
            visible ? p * (dpt_w[r * S::kScore + c] - sh.di_s[c]) : 0.f;
        pt_w[r * S::kProb + c] = FromFloat<bf16>(p);
        dst_w[r * S::kProb + c] = FromFloat<bf16>(ds);
      }
      __syncwarp();
      WarpProductAccumulate<kD>(pt_w, S::kProb, sh.gs, S::kHalf, dv);
      WarpProductAccumulate<kD>(dst_w, S::kProb, sh.qs, S::kHalf, dk);
    }
  }
  __syncthreads();  // every warp is done with Q, dO, whose space `stage` takes
  float* stage_w = sh.stage + wrow * S::kAcc;
  WarpAddRows<kD>(dk, scale, stage_w, dqkv + kv.k, kv.qkv_stride, key0 + wrow,
                  kv.T);
  WarpAddRows<kD>(dv, 1.f, stage_w, dqkv + kv.v, kv.qkv_stride, key0 + wrow,
                  kv.T);
#else
  __trap();
#endif
}

// dQ of one 64-query tile, over the key tiles up to the diagonal.
template <int kD>
__global__ void __launch_bounds__(kThreads)
    MmaBackwardQueryKernel(AttentionDims d, float scale, const bf16* dout,
                           const bf16* qkv, const float* lse, const float* di,
                           bf16* dqkv) {
#if TRELLIS_ATTENTION_MMA
  using S = Strides<kD>;
  using B = Bytes<kD>;
  extern __shared__ __align__(128) unsigned char smem[];
  SharedCarver carve(smem);
  unsigned char* pair = carve.Take<unsigned char>(B::kQueryPair);
  bf16* qs = reinterpret_cast<bf16*>(pair);
  bf16* gs = reinterpret_cast<bf16*>(pair + B::kHalfTile);
  float* stage = reinterpret_cast<float*>(pair);  // after the loop only
  bf16* ks = carve.Take<bf16>(B::kHalfTile);
  bf16* vs = carve.Take<bf16>(B::kHalfTile);
  float* ss = carve.Take<float>(B::kScoreTile);
  float* dps = carve.Take<float>(B::kScoreTile);
  bf16* dss = carve.Take<bf16>(B::kProbTile);

  const Head hd(d, blockIdx.y / d.H, blockIdx.y % d.H);
  const int64_t row0 = ReversedTile() * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int wrow = warp * kRowsPerWarp;
  const int64_t t = row0 + wrow + r;  // this lane's query row
  float* s_w = ss + wrow * S::kScore;
  float* dp_w = dps + wrow * S::kScore;
  bf16* ds_w = dss + wrow * S::kProb;
  const float row_lse = t < hd.T ? lse[hd.stat + t] : 0.f;
  const float row_di = t < hd.T ? di[hd.stat + t] : 0.f;

  LoadTile<kD>(qkv + hd.q, hd.qkv_stride, row0, hd.T, qs);
  LoadTile<kD>(dout + hd.o, hd.C, row0, hd.T, gs);
  FragAcc dq[kD / kFrag];
#pragma unroll
  for (int n = 0; n < kD / kFrag; ++n) wmma::fill_fragment(dq[n], 0.f);
  for (int64_t j0 = 0; j0 <= row0; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous K, V
    LoadTile<kD>(qkv + hd.k, hd.qkv_stride, j0, hd.T, ks);
    LoadTile<kD>(qkv + hd.v, hd.qkv_stride, j0, hd.T, vs);
    __syncthreads();
    // S (16 queries, kTile keys) = Q_w·Kᵀ; dP = dO_w·Vᵀ.
    WarpProductTransposed<kD>(qs + wrow * S::kHalf, S::kHalf, ks, S::kHalf, s_w,
                              S::kScore);
    WarpProductTransposed<kD>(gs + wrow * S::kHalf, S::kHalf, vs, S::kHalf,
                              dp_w, S::kScore);
    __syncwarp();
#pragma unroll 4
    for (int c = half; c < kTile; c += 2) {
      const int64_t j = j0 + c;
      const bool visible = j <= t && j < hd.T && t < hd.T;
      const float p =
          visible ? expf(s_w[r * S::kScore + c] * scale - row_lse) : 0.f;
      const float ds = visible ? p * (dp_w[r * S::kScore + c] - row_di) : 0.f;
      ds_w[r * S::kProb + c] = FromFloat<bf16>(ds);
    }
    __syncwarp();
    WarpProductAccumulate<kD>(ds_w, S::kProb, ks, S::kHalf, dq);
  }
  __syncthreads();  // every warp is done with Q, dO, whose space `stage` takes
  WarpAddRows<kD>(dq, scale, stage + wrow * S::kAcc, dqkv + hd.q, hd.qkv_stride,
                  row0 + wrow, hd.T);
#else
  __trap();
#endif
}

float Scale(const AttentionDims& d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.D)));
}

// 64-row tiles of each of the B · heads (batch, head).
dim3 TileGrid(const AttentionDims& d, int64_t heads) {
  return dim3(static_cast<unsigned>((d.T + kTile - 1) / kTile),
              static_cast<unsigned>(d.B * heads));
}

// Launches kernel over the tiles of `heads` heads with `bytes` of dynamic
// shared memory (above the default 48 KiB only after opting in).
template <typename Kernel, typename... Args>
void LaunchTiles(Kernel kernel, int bytes, const AttentionDims& d,
                 int64_t heads, Args... args) {
  TRELLIS_CUDA_CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<TileGrid(d, heads), kThreads, bytes>>>(args...);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

// Calls fn(std::integral_constant<int, kD>{}) for D ∈ {32, 64, 128}.
template <typename Fn>
void DispatchMmaHeadDim(int64_t D, Fn&& fn) {
  if (D == 32) {
    fn(std::integral_constant<int, 32>{});
  } else if (D == 64) {
    fn(std::integral_constant<int, 64>{});
  } else {
    fn(std::integral_constant<int, 128>{});
  }
}

// Whether the code this device runs for `kernel` was compiled for
// compute_80 or newer, i.e. holds the tensor-core body rather than the trap:
// a build for older architectures only (CMAKE_CUDA_ARCHITECTURES=75, say)
// runs that PTX, JIT-compiled, on newer devices too. A kernel without code
// for this device counts as false (the error is cleared so that the next
// launch check does not report it).
template <typename Kernel>
bool HasMmaCode(Kernel kernel) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.ptxVersion >= 80;
}

}  // namespace

bool MmaAttentionSupported(Elem t, const AttentionDims& d,
                           std::initializer_list<const void*> pointers) {
  if (t != Elem::kBF16) return false;
  if (d.D != 32 && d.D != 64 && d.D != 128) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  int device = 0, major = 0, shared = 0;
  TRELLIS_CUDA_CHECK(cudaGetDevice(&device));
  TRELLIS_CUDA_CHECK(cudaDeviceGetAttribute(
      &major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return false;
  TRELLIS_CUDA_CHECK(cudaDeviceGetAttribute(
      &shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int needed = 0;
  bool compiled = true;
  DispatchMmaHeadDim(d.D, [&](auto width) {
    constexpr int kD = decltype(width)::value;
    needed = Bytes<kD>::kMax;
    compiled = HasMmaCode(MmaForwardKernel<kD>) &&
               HasMmaCode(MmaBackwardKeyKernel<kD>) &&
               HasMmaCode(MmaBackwardQueryKernel<kD>);
  });
  return compiled && shared >= needed;
}

void MmaAttentionForward(const AttentionDims& dims, const void* qkv, void* out,
                         float* lse) {
  const AttentionDims d = WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return;
  DispatchMmaHeadDim(d.D, [&](auto width) {
    constexpr int kD = decltype(width)::value;
    LaunchTiles(MmaForwardKernel<kD>, Bytes<kD>::kForward, d, d.H, d, Scale(d),
                static_cast<const bf16*>(qkv), static_cast<bf16*>(out), lse);
  });
}

void MmaAttentionBackward(const AttentionDims& dims, const void* dout,
                          const void* qkv, const void* out, const float* lse,
                          void* dqkv) {
  const AttentionDims d = WithKvHeads(dims);
  if (d.B * d.H * d.T == 0) return;
  const auto* g = static_cast<const bf16*>(dout);
  const auto* x = static_cast<const bf16*>(qkv);
  auto* dx = static_cast<bf16*>(dqkv);
  Scratch<float> di(d.B * d.H * d.T);
  constexpr int kRowThreads = 256;
  RowDotKernel<<<GridFor(d.B * d.T * d.H * 32, kRowThreads), kRowThreads>>>(
      d, g, static_cast<const bf16*>(out), di.get());
  TRELLIS_CUDA_CHECK_LAUNCH();
  DispatchMmaHeadDim(d.D, [&](auto width) {
    constexpr int kD = decltype(width)::value;
    LaunchTiles(MmaBackwardKeyKernel<kD>, Bytes<kD>::kKeyValue, d, d.Hkv, d,
                Scale(d), g, x, lse, static_cast<const float*>(di.get()), dx);
    LaunchTiles(MmaBackwardQueryKernel<kD>, Bytes<kD>::kQuery, d, d.H, d,
                Scale(d), g, x, lse, static_cast<const float*>(di.get()), dx);
  });
}

}  // namespace cuda_launch
}  // namespace trellis
