// The shared pieces of the tensor-core attention kernels
// (attention_mma.cu): tile sizes, shared-memory strides and budgets, the
// carving of dynamic shared memory, where a (batch, head)'s rows live, tile
// loads and the warp-level wmma products. Included by attention_mma.cu only.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_TILES_CUH_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_TILES_CUH_

#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/device_common.cuh"

// wmma's bfloat16 fragments exist from sm_80 on; device code for older
// architectures traps instead (the host never launches it there, see
// MmaAttentionSupported).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TRELLIS_ATTENTION_MMA 1
#else
#define TRELLIS_ATTENTION_MMA 0
#endif

namespace trellis {
namespace cuda_launch {
namespace attention_mma {

constexpr int kTile = 64;  // rows per block, and keys (queries) per tile
constexpr int kWarps = 4;  // each owns kRowsPerWarp of the block's rows
constexpr int kThreads = 32 * kWarps;
constexpr int kFrag = 16;  // wmma fragment edge
constexpr int kRowsPerWarp = kTile / kWarps;
static_assert(kRowsPerWarp == kFrag, "a warp owns one fragment row");
// The softmax and the write-backs give each lane half a row: lane 2r + half
// takes row r, columns half, half + 2, half + 4, ...
static_assert(kRowsPerWarp * 2 == 32, "two lanes per row");

// Row strides of shared tiles, in elements. wmma needs strides that are
// multiples of 8 (bf16) or 4 (float) elements and fragment pointers that are
// 32-byte aligned: fragments start at multiples of 16 rows and 16 columns,
// and every region starts at a multiple of 128 bytes. The padding beyond the
// row's width shifts consecutive rows across shared-memory banks.
template <int kD>
struct Strides {
  static constexpr int kHalf = kD + 8;      // bf16 (kTile, kD): Q, K, V, dO
  static constexpr int kProb = kTile + 8;   // bf16 (rows, kTile): P, dS
  static constexpr int kScore = kTile + 4;  // float (rows, kTile): S, dP
  static constexpr int kAcc = kD + 4;       // float (rows, kD): O, dQ, dK, dV
  static_assert(kHalf % 8 == 0 && kProb % 8 == 0, "bf16 wmma stride");
  static_assert(kScore % 4 == 0 && kAcc % 4 == 0, "float wmma stride");
  static_assert(kHalf * 2 % 16 == 0, "16-byte tile loads");
};

constexpr int RoundUp128(int bytes) { return (bytes + 127) / 128 * 128; }
constexpr int MaxOf(int a, int b) { return a > b ? a : b; }

template <int kD>
struct Bytes {
  using S = Strides<kD>;
  static constexpr int kHalfTile = RoundUp128(kTile * S::kHalf * 2);
  static constexpr int kProbTile = RoundUp128(kTile * S::kProb * 2);
  static constexpr int kScoreTile = RoundUp128(kTile * S::kScore * 4);
  static constexpr int kAccTile = RoundUp128(kTile * S::kAcc * 4);
  static constexpr int kRowVector = RoundUp128(kTile * 4);
  // Forward: Q, K, V, S, P, O.
  static constexpr int kForward =
      3 * kHalfTile + kScoreTile + kProbTile + kAccTile;
  // dK/dV: K, V, then Q and dO (whose space holds the float dK/dV on the way
  // out), Sᵀ, dPᵀ, Pᵀ, dSᵀ, and lse, Di of the query tile.
  static constexpr int kQueryPair = MaxOf(2 * kHalfTile, kAccTile);
  static constexpr int kKeyValue = 2 * kHalfTile + kQueryPair + 2 * kScoreTile +
                                   2 * kProbTile + 2 * kRowVector;
  // dQ: Q and dO (whose space holds the float dQ on the way out), K, V, S,
  // dP, dS.
  static constexpr int kQuery =
      kQueryPair + 2 * kHalfTile + 2 * kScoreTile + kProbTile;
  static constexpr int kMax = MaxOf(kForward, MaxOf(kKeyValue, kQuery));
};

// Hands out consecutive 128-byte aligned regions of dynamic shared memory.
class SharedCarver {
 public:
  __device__ explicit SharedCarver(unsigned char* base) : at_(base) {}
  template <typename T>
  __device__ T* Take(int bytes) {
    T* region = reinterpret_cast<T*>(at_);
    at_ += bytes;
    return region;
  }

 private:
  unsigned char* at_;
};

// Where (batch b, query head h)'s rows live: Q row t at q + t·qkv_stride,
// its key/value head's K and V rows at k and v + t·qkv_stride (qkv rows are
// [H q heads | Hkv k heads | Hkv v heads], query head h reading key/value
// head h / (H / Hkv)); out/dout row t at o + t·C; lse and Di at
// (b·H + h)·T + t. REQUIRES: d.Hkv filled in (WithKvHeads).
struct Head {
  int64_t T, C, qkv_stride;
  int64_t q, k, v, o, stat;  // element offsets of row 0
  __device__ Head(const AttentionDims& d, int64_t b, int64_t h)
      : T(d.T),
        C(d.H * d.D),
        qkv_stride((d.H + 2 * d.Hkv) * d.D),
        q(b * d.T * qkv_stride + h * d.D),
        k(b * d.T * qkv_stride + C + h / (d.H / d.Hkv) * d.D),
        v(k + d.Hkv * d.D),
        o(b * d.T * C + h * d.D),
        stat((b * d.H + h) * d.T) {}
};

// Copies rows [row0, row0 + kTile) × kD columns of a row-major bf16 matrix
// with row stride `stride` into a shared tile of row stride Strides::kHalf,
// 16 bytes at a time; rows at or past `rows` become zeros (so masked
// products never meet stale or non-finite values). Called by every thread.
template <int kD>
__device__ void LoadTile(const bf16* src, int64_t stride, int64_t row0,
                         int64_t rows, bf16* dst) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < rows) {
      v = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + c);
    }
    *reinterpret_cast<uint4*>(dst + r * Strides<kD>::kHalf + c) = v;
  }
}

#if TRELLIS_ATTENTION_MMA
namespace wmma = nvcuda::wmma;
using FragA =
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBRow =
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragBCol =
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// One warp: out (16, kTile) = a (16, kD) · bᵀ, with b (kTile, kD); a and b
// bf16 row-major (strides lda, ldb), out float row-major (stride ldo).
// Element (k, n) of a column-major 16×16 piece of bᵀ at b + n0·ldb + k0 is
// b[n0 + n][k0 + k], which is what the col_major fragment reads.
template <int kD>
__device__ void WarpProductTransposed(const bf16* a, int lda, const bf16* b,
                                      int ldb, float* out, int ldo) {
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int k = 0; k < kD / kFrag; ++k) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, a + k * kFrag, lda);
      wmma::load_matrix_sync(fb, b + n * kFrag * ldb + k * kFrag, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * kFrag, acc, ldo, wmma::mem_row_major);
  }
}

// One warp: acc (16, kD) += a (16, kTile) · b (kTile, kD); a and b bf16
// row-major (strides lda, ldb); acc[n] holds columns [16n, 16n + 16).
template <int kD>
__device__ void WarpProductAccumulate(const bf16* a, int lda, const bf16* b,
                                      int ldb, FragAcc (&acc)[kD / kFrag]) {
#pragma unroll
  for (int k = 0; k < kTile / kFrag; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k * kFrag, lda);
#pragma unroll
    for (int n = 0; n < kD / kFrag; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + k * kFrag * ldb + n * kFrag, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// One warp adds `factor` times its accumulators (16 rows, kD columns) onto
// bf16 rows `row0 + r` of dst (row stride `stride`) for rows below `rows`,
// staging them through `stage` (float, 16 × Strides::kAcc, the warp's own).
template <int kD>
__device__ void WarpAddRows(const FragAcc (&acc)[kD / kFrag], float factor,
                            float* stage, bf16* dst, int64_t stride,
                            int64_t row0, int64_t rows) {
  constexpr int kAcc = Strides<kD>::kAcc;
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
#pragma unroll
  for (int n = 0; n < kD / kFrag; ++n) {
    wmma::store_matrix_sync(stage + n * kFrag, acc[n], kAcc,
                            wmma::mem_row_major);
  }
  __syncwarp();
  if (row0 + r < rows) {
    bf16* row = dst + (row0 + r) * stride;
#pragma unroll 4
    for (int c = half; c < kD; c += 2) {
      row[c] = FromFloat<bf16>(ToFloat(row[c]) + factor * stage[r * kAcc + c]);
    }
  }
  __syncwarp();  // `stage` is free again
}

// Tiles in reverse: causal tiles further down have more keys, so the longest
// blocks start first and the short ones fill the tail.
__device__ inline int64_t ReversedTile() { return gridDim.x - 1 - blockIdx.x; }
#endif  // TRELLIS_ATTENTION_MMA

}  // namespace attention_mma
}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_MMA_TILES_CUH_
