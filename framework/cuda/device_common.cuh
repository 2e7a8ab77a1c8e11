// Internal to framework/cuda/*.cu: element conversion, warp and block
// reductions, grid sizing, dtype dispatch, stream-ordered scratch memory and
// the deterministic column-sum reduction the bias and LayerNorm weight
// gradients share.
#ifndef TRELLIS_FRAMEWORK_CUDA_DEVICE_COMMON_CUH_
#define TRELLIS_FRAMEWORK_CUDA_DEVICE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_launch {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// The sum (or max) over the block, returned to every thread. REQUIRES:
// blockDim.x a multiple of 32, at most 1024; every thread calls it.
template <typename T, bool kMax = false>
__device__ T BlockReduce(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  if constexpr (kMax) {
    v = WarpMax(v);
  } else {
    v = WarpSum(v);
  }
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T total = partial[0];
  for (int w = 1; w < warps; ++w) {
    if constexpr (kMax) {
      total = fmaxf(total, partial[w]);
    } else {
      total += partial[w];
    }
  }
  return total;
}

// `for` over the elements [0, n) this thread handles in a grid-stride loop.
#define TRELLIS_GRID_STRIDE(i, n)                                           \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// Blocks of `threads` for a grid-stride loop over n elements.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 1 << 16));
}

// ---- 128-bit packs ----
//
// Elementwise kernels move 16 bytes per load and store (4 floats or 8
// bfloat16s) when every pointer they touch is 16-byte aligned, and one
// element at a time otherwise: a kernel templated on P (elements per pack)
// walks n / P packs, then the n % P tail elements one by one.

template <typename T, int P>
struct alignas(sizeof(T) * P) Pack {
  T v[P];
};

// The elements of a 16-byte pack of T.
template <typename T>
inline constexpr int kPackOf = static_cast<int>(16 / sizeof(T));

template <int P, typename T>
__device__ __forceinline__ Pack<T, P> LoadPack(const T* p) {
  return *reinterpret_cast<const Pack<T, P>*>(p);
}

template <int P, typename T>
__device__ __forceinline__ void StorePack(T* p, const Pack<T, P>& pack) {
  *reinterpret_cast<Pack<T, P>*>(p) = pack;
}

inline bool Aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Calls launch(std::integral_constant<int, P>{}) with P = kPackOf<T> when
// every pointer is 16-byte aligned, else P = 1.
template <typename T, typename Launch>
void WithPack(std::initializer_list<const void*> pointers, Launch&& launch) {
  if (Aligned16(pointers)) {
    launch(std::integral_constant<int, kPackOf<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// Calls launch(std::integral_constant<int, P>{}) for kernels that walk rows
// of `ld` elements from each pointer: P = kPackOf<T> when every pointer is
// 16-byte aligned and so is every row (ld · sizeof(T) a multiple of 16),
// else P = 1.
template <typename T, typename Launch>
void WithRowPack(std::initializer_list<const void*> pointers, int64_t ld,
                 Launch&& launch) {
  if (Aligned16(pointers) && (ld * static_cast<int64_t>(sizeof(T))) % 16 == 0) {
    launch(std::integral_constant<int, kPackOf<T>>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

// `for` over packs [0, n / P) this thread handles; element index j·P + k.
#define TRELLIS_PACK_STRIDE(j, n, P) TRELLIS_GRID_STRIDE(j, (n) / (P))
// `for` over the tail elements [n / P · P, n) this thread handles.
#define TRELLIS_TAIL_STRIDE(i, n, P)                                         \
  for (int64_t i =                                                           \
           (n) / (P) * (P) + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; \
       i < (n); i += int64_t{gridDim.x} * blockDim.x)

// Calls fn(T{}) with T = float or bf16 after `t`.
template <typename Fn>
void DispatchElem(Elem t, Fn&& fn) {
  if (t == Elem::kF32) {
    fn(float{});
  } else {
    fn(bf16{});
  }
}

// Stream-ordered device scratch memory of `count` Ts, freed at scope end.
template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t count) {
    TRELLIS_CUDA_CHECK(cudaMallocAsync(
        &data_, sizeof(T) * static_cast<size_t>(std::max<int64_t>(count, 1)),
        nullptr));
  }
  ~Scratch() { TRELLIS_CUDA_CHECK(cudaFreeAsync(data_, nullptr)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
};

// ---- Column sums: out_k (cols) += sum over rows r of term_k(r, c) ----
//
// Pass 1: blocks of 32 columns × 8 row lanes each reduce a span of rows into
// float partials (kOut, splits, cols); pass 2 adds the partials, in split
// order, onto the outputs. The order of every sum is fixed by the sizes, so
// results are bitwise reproducible. `Terms` is a device functor:
//   __device__ void operator()(int64_t r, int64_t c, float* acc) const
// adding its kOut terms for element (r, c) into acc[0..kOut).

inline constexpr int kColumnTile = 32;
inline constexpr int kColumnLanes = 8;

template <int kOut, typename Terms>
__global__ void ColumnPartialKernel(Terms terms, int64_t rows, int64_t cols,
                                    int64_t rows_per_split, float* partial) {
  __shared__ float tile[kOut][kColumnLanes][kColumnTile + 1];
  const int64_t c = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t split = blockIdx.y, splits = gridDim.y;
  const int64_t r_begin = split * rows_per_split;
  const int64_t r_end = min(rows, r_begin + rows_per_split);
  float acc[kOut] = {};
  if (c < cols) {
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kColumnLanes) {
      terms(r, c, acc);
    }
  }
  for (int k = 0; k < kOut; ++k) tile[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 0; k < kOut; ++k) {
      float sum = 0.f;
      for (int y = 0; y < kColumnLanes; ++y) sum += tile[k][y][threadIdx.x];
      partial[(k * splits + split) * cols + c] = sum;
    }
  }
}

template <int kOut, typename OutT>
__global__ void ColumnFinishKernel(const float* partial, int64_t splits,
                                   int64_t cols, OutT* out0, OutT* out1) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    for (int k = 0; k < kOut; ++k) {
      float sum = 0.f;
      for (int64_t s = 0; s < splits; ++s) {
        sum += partial[(k * splits + s) * cols + c];
      }
      OutT* out = k == 0 ? out0 : out1;
      out[c] = FromFloat<OutT>(ToFloat(out[c]) + sum);
    }
  }
}

template <int kOut, typename OutT, typename Terms>
void LaunchColumnSums(const Terms& terms, int64_t rows, int64_t cols,
                      OutT* out0, OutT* out1) {
  if (rows == 0 || cols == 0) return;
  const int64_t col_blocks = (cols + kColumnTile - 1) / kColumnTile;
  // About 2048 blocks in all, each row lane summing at least 4 rows.
  const int64_t max_splits = std::max<int64_t>(1, rows / (4 * kColumnLanes));
  const int64_t splits = std::clamp<int64_t>(
      2048 / col_blocks, 1, std::min<int64_t>(max_splits, 1024));
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  Scratch<float> partial(kOut * splits * cols);
  const dim3 grid(static_cast<unsigned>(col_blocks),
                  static_cast<unsigned>(splits));
  const dim3 block(kColumnTile, kColumnLanes);
  ColumnPartialKernel<kOut>
      <<<grid, block>>>(terms, rows, cols, rows_per_split, partial.get());
  TRELLIS_CUDA_CHECK_LAUNCH();
  ColumnFinishKernel<kOut>
      <<<GridFor(cols, 256), 256>>>(partial.get(), splits, cols, out0, out1);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_DEVICE_COMMON_CUH_
