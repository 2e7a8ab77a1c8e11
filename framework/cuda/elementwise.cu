// Elementwise kernels: fill, convert, add, axpy, scale, bias, column sums,
// whole-tensor sums, GELU and the fused AdamW step. Grid-stride loops over
// float32 or bfloat16 elements, float32 arithmetic.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "framework/cuda/cuda_memory.h"
#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;

template <typename U>
__global__ void FillKernel(U* data, int64_t n, U value) {
  TRELLIS_GRID_STRIDE(i, n) data[i] = value;
}

template <typename S, typename D>
__global__ void ConvertKernel(const S* src, D* dst, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) dst[i] = FromFloat<D>(ToFloat(src[i]));
}

template <int P, typename T>
__global__ void AddKernel(const T* a, const T* b, T* out, int64_t n) {
  TRELLIS_PACK_STRIDE(j, n, P) {
    const Pack<T, P> pa = LoadPack<P>(a + j * P), pb = LoadPack<P>(b + j * P);
    Pack<T, P> po;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      po.v[k] = FromFloat<T>(ToFloat(pa.v[k]) + ToFloat(pb.v[k]));
    }
    StorePack<P>(out + j * P, po);
  }
  TRELLIS_TAIL_STRIDE(i, n, P) {
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  }
}

template <int P, typename T>
__global__ void AxpyKernel(float alpha, const T* x, T* y, int64_t n) {
  TRELLIS_PACK_STRIDE(j, n, P) {
    const Pack<T, P> px = LoadPack<P>(x + j * P);
    Pack<T, P> py = LoadPack<P>(y + j * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      py.v[k] = FromFloat<T>(ToFloat(py.v[k]) + alpha * ToFloat(px.v[k]));
    }
    StorePack<P>(y + j * P, py);
  }
  TRELLIS_TAIL_STRIDE(i, n, P) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + alpha * ToFloat(x[i]));
  }
}

template <int P, typename T>
__global__ void ScaleKernel(float s, T* x, int64_t n) {
  TRELLIS_PACK_STRIDE(j, n, P) {
    Pack<T, P> px = LoadPack<P>(x + j * P);
#pragma unroll
    for (int k = 0; k < P; ++k) px.v[k] = FromFloat<T>(ToFloat(px.v[k]) * s);
    StorePack<P>(x + j * P, px);
  }
  TRELLIS_TAIL_STRIDE(i, n, P) x[i] = FromFloat<T>(ToFloat(x[i]) * s);
}

template <typename T>
__global__ void ScaleRowsKernel(const float* w, T* x, int64_t rows,
                                int64_t cols) {
  TRELLIS_GRID_STRIDE(i, rows * cols) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * w[i / cols]);
  }
}

// out (n) += src (n), src float32.
template <typename T>
__global__ void AccumulateFloatKernel(const float* src, T* out, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) out[i] = FromFloat<T>(ToFloat(out[i]) + src[i]);
}

template <typename T>
__global__ void AddBiasKernel(const T* bias, T* out, int64_t rows,
                              int64_t cols) {
  TRELLIS_GRID_STRIDE(i, rows * cols) {
    out[i] = FromFloat<T>(ToFloat(out[i]) + ToFloat(bias[i % cols]));
  }
}

// One term per element: in (rows, cols) [r, c].
template <typename T>
struct PlainTerms {
  const T* in;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float* acc) const {
    acc[0] += ToFloat(in[r * cols + c]);
  }
};

constexpr int kSumBlocks = 256;

// Per block: the float64 sum and sum of squares of its grid-stride share.
template <typename T>
__global__ void SumPartialKernel(const T* x, int64_t n, double* partial) {
  double sum = 0, squares = 0;
  TRELLIS_GRID_STRIDE(i, n) {
    const double v = ToFloat(x[i]);
    sum += v;
    squares += v * v;
  }
  sum = BlockReduce<double>(sum);
  squares = BlockReduce<double>(squares);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = sum;
    partial[2 * blockIdx.x + 1] = squares;
  }
}

// One block of kThreads adds the block partials (a gradient norm's are
// 256 per tensor, so tens of thousands): thread t adds partials t,
// t + kThreads, ... in turn, then a fixed tree adds the threads' sums, so
// every run adds in the same order.
__global__ void SumFinishKernel(const double* partial, int blocks,
                                double* result) {
  static_assert((kThreads & (kThreads - 1)) == 0, "a power of two");
  __shared__ double sums[kThreads], squares[kThreads];
  const int t = threadIdx.x;
  double sum = 0, square = 0;
  for (int b = t; b < blocks; b += kThreads) {
    sum += partial[2 * b];
    square += partial[2 * b + 1];
  }
  sums[t] = sum;
  squares[t] = square;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (t < width) {
      sums[t] += sums[t + width];
      squares[t] += squares[t + width];
    }
    __syncthreads();
  }
  if (t == 0) {
    result[0] = sums[0];
    result[1] = squares[0];
  }
}

constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float Gelu(float v) {
  const float t = tanhf(kSqrtTwoOverPi * (v + kGeluCube * v * v * v));
  return 0.5f * v * (1.f + t);
}

// gelu'(v).
__device__ __forceinline__ float GeluSlope(float v) {
  const float t = tanhf(kSqrtTwoOverPi * (v + kGeluCube * v * v * v));
  const float du = kSqrtTwoOverPi * (1.f + 3.f * kGeluCube * v * v);
  return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du;
}

template <int P, typename T>
__global__ void GeluForwardKernel(const T* x, T* out, int64_t n) {
  TRELLIS_PACK_STRIDE(j, n, P) {
    Pack<T, P> p = LoadPack<P>(x + j * P);
#pragma unroll
    for (int k = 0; k < P; ++k) p.v[k] = FromFloat<T>(Gelu(ToFloat(p.v[k])));
    StorePack<P>(out + j * P, p);
  }
  TRELLIS_TAIL_STRIDE(i, n, P) out[i] = FromFloat<T>(Gelu(ToFloat(x[i])));
}

// dx = (kAccumulate ? dx : 0) + gelu'(x) · dout; dx may alias dout.
template <int P, bool kAccumulate, typename T>
__global__ void GeluBackwardKernel(const T* x, const T* dout, T* dx,
                                   int64_t n) {
  TRELLIS_PACK_STRIDE(j, n, P) {
    const Pack<T, P> px = LoadPack<P>(x + j * P);
    const Pack<T, P> pd = LoadPack<P>(dout + j * P);
    Pack<T, P> pg;
    if constexpr (kAccumulate) pg = LoadPack<P>(dx + j * P);
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float local = GeluSlope(ToFloat(px.v[k])) * ToFloat(pd.v[k]);
      pg.v[k] = FromFloat<T>(kAccumulate ? ToFloat(pg.v[k]) + local : local);
    }
    StorePack<P>(dx + j * P, pg);
  }
  TRELLIS_TAIL_STRIDE(i, n, P) {
    const float local = GeluSlope(ToFloat(x[i])) * ToFloat(dout[i]);
    dx[i] = FromFloat<T>(kAccumulate ? ToFloat(dx[i]) + local : local);
  }
}

// One element's AdamW update: returns the new parameter, updates *m, *v.
__device__ __forceinline__ float AdamWElement(const AdamWScalars& s,
                                              float weight_decay, float g,
                                              float p, float* m, float* v) {
  g *= s.grad_scale;
  const float mi = s.beta1 * *m + s.one_minus_beta1 * g;
  const float vi = s.beta2 * *v + s.one_minus_beta2 * g * g;
  *m = mi;
  *v = vi;
  const float update = (mi * s.inv_bias_correction1) /
                       (sqrtf(vi * s.inv_bias_correction2) + s.eps);
  return p - s.lr * (update + weight_decay * p);
}

template <typename G, typename P>
__global__ void AdamWKernel(AdamWScalars s, const G* grad, P* param, float* m,
                            float* v, int64_t n) {
  TRELLIS_GRID_STRIDE(i, n) {
    param[i] = FromFloat<P>(AdamWElement(s, s.weight_decay, ToFloat(grad[i]),
                                         ToFloat(param[i]), &m[i], &v[i]));
  }
}

// The slices of one multi-tensor launch, passed by value (kernel parameter
// space, 32 KiB on Volta and later).
struct AdamWSlices {
  AdamWSlice slice[kAdamWSlices];
};
static_assert(sizeof(AdamWSlices) + sizeof(AdamWScalars) < 32000,
              "multi-tensor AdamW parameters exceed the kernel's 32 KiB");

// blockIdx.y picks the slice; the x blocks stride over its elements.
__global__ void AdamWManyKernel(AdamWScalars s,
                                const __grid_constant__ AdamWSlices slices) {
  const AdamWSlice& t = slices.slice[blockIdx.y];
  TRELLIS_GRID_STRIDE(i, t.n) {
    const float p = AdamWElement(s, t.weight_decay, t.grad[i], t.param[i],
                                 &t.m[i], &t.v[i]);
    t.param[i] = p;
    if (t.refresh == nullptr) continue;
    if (t.refresh_type == Elem::kBF16) {
      static_cast<bf16*>(t.refresh)[i] = FromFloat<bf16>(p);
    } else {
      static_cast<float*>(t.refresh)[i] = p;
    }
  }
}

}  // namespace

void Fill(void* data, int64_t n, int elem_bytes, uint64_t pattern) {
  if (n == 0) return;
  const unsigned grid = GridFor(n, kThreads);
  switch (elem_bytes) {
    case 2:
      FillKernel<<<grid, kThreads>>>(static_cast<uint16_t*>(data), n,
                                     static_cast<uint16_t>(pattern));
      break;
    case 4:
      FillKernel<<<grid, kThreads>>>(static_cast<uint32_t*>(data), n,
                                     static_cast<uint32_t>(pattern));
      break;
    default:
      FillKernel<<<grid, kThreads>>>(static_cast<uint64_t*>(data), n, pattern);
      break;
  }
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void Convert(Elem src_type, const void* src, Elem dst_type, void* dst,
             int64_t n) {
  if (n == 0) return;
  DispatchElem(src_type, [&](auto s) {
    using S = decltype(s);
    DispatchElem(dst_type, [&](auto d) {
      using D = decltype(d);
      ConvertKernel<<<GridFor(n, kThreads), kThreads>>>(
          static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void Add(Elem t, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithPack<T>({a, b, out}, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      AddKernel<P><<<GridFor(n / P + 1, kThreads), kThreads>>>(
          static_cast<const T*>(a), static_cast<const T*>(b),
          static_cast<T*>(out), n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void Axpy(Elem t, float alpha, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithPack<T>({x, y}, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      AxpyKernel<P><<<GridFor(n / P + 1, kThreads), kThreads>>>(
          alpha, static_cast<const T*>(x), static_cast<T*>(y), n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void Scale(Elem t, float s, void* x, int64_t n) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithPack<T>({x}, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      ScaleKernel<P><<<GridFor(n / P + 1, kThreads), kThreads>>>(
          s, static_cast<T*>(x), n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void ScaleRows(Elem t, const float* w, void* x, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    ScaleRowsKernel<<<GridFor(rows * cols, kThreads), kThreads>>>(
        w, static_cast<T*>(x), rows, cols);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AddBias(Elem t, const void* bias, void* out, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    AddBiasKernel<<<GridFor(rows * cols, kThreads), kThreads>>>(
        static_cast<const T*>(bias), static_cast<T*>(out), rows, cols);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void ColumnSums(Elem in_type, const void* in, int64_t rows, int64_t cols,
                Elem out_type, void* out) {
  DispatchElem(in_type, [&](auto i) {
    using I = decltype(i);
    DispatchElem(out_type, [&](auto o) {
      using O = decltype(o);
      LaunchColumnSums<1>(PlainTerms<I>{static_cast<const I*>(in), cols}, rows,
                          cols, static_cast<O*>(out), static_cast<O*>(nullptr));
    });
  });
}

void SumAndSumOfSquares(Elem t, const void* x, int64_t n, double* sum,
                        double* sum_of_squares) {
  Scratch<double> partial(2 * kSumBlocks + 2);
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    SumPartialKernel<<<kSumBlocks, kThreads>>>(static_cast<const T*>(x), n,
                                               partial.get());
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
  double* result = partial.get() + 2 * kSumBlocks;
  SumFinishKernel<<<1, kThreads>>>(partial.get(), kSumBlocks, result);
  TRELLIS_CUDA_CHECK_LAUNCH();
  double host[2];
  CudaCopyToHost(host, result, sizeof(host));  // the host wait, counted
  *sum = host[0];
  *sum_of_squares = host[1];
}

double SumOfSquaresMany(const Elem* types, const void* const* xs,
                        const int64_t* sizes, int count) {
  if (count == 0) return 0.0;
  // Array i's block partials at 2·kSumBlocks·i; one pass adds them all.
  const int blocks = kSumBlocks * count;
  Scratch<double> partial(2 * static_cast<int64_t>(blocks) + 2);
  for (int i = 0; i < count; ++i) {
    DispatchElem(types[i], [&](auto tag) {
      using T = decltype(tag);
      SumPartialKernel<<<kSumBlocks, kThreads>>>(
          static_cast<const T*>(xs[i]), sizes[i],
          partial.get() + 2 * static_cast<int64_t>(kSumBlocks) * i);
    });
    TRELLIS_CUDA_CHECK_LAUNCH();
  }
  double* result = partial.get() + 2 * static_cast<int64_t>(blocks);
  SumFinishKernel<<<1, kThreads>>>(partial.get(), blocks, result);
  TRELLIS_CUDA_CHECK_LAUNCH();
  double host[2];
  CudaCopyToHost(host, result, sizeof(host));  // the host wait, counted
  return host[1];
}

void GeluForward(Elem t, const void* x, void* out, int64_t n) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithPack<T>({x, out}, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      GeluForwardKernel<P><<<GridFor(n / P + 1, kThreads), kThreads>>>(
          static_cast<const T*>(x), static_cast<T*>(out), n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void GeluBackward(Elem t, const void* x, const void* dout, void* dx, int64_t n,
                  bool accumulate) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    WithPack<T>({x, dout, dx}, [&](auto pack) {
      constexpr int P = decltype(pack)::value;
      const unsigned grid = GridFor(n / P + 1, kThreads);
      const auto* xt = static_cast<const T*>(x);
      const auto* dt = static_cast<const T*>(dout);
      auto* gt = static_cast<T*>(dx);
      if (accumulate) {
        GeluBackwardKernel<P, true><<<grid, kThreads>>>(xt, dt, gt, n);
      } else {
        GeluBackwardKernel<P, false><<<grid, kThreads>>>(xt, dt, gt, n);
      }
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AccumulateFloat(const float* src, Elem t, void* out, int64_t n) {
  if (n == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    AccumulateFloatKernel<<<GridFor(n, kThreads), kThreads>>>(
        src, static_cast<T*>(out), n);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AdamW(const AdamWScalars& s, Elem grad_type, const void* grad,
           Elem param_type, void* param, float* m, float* v, int64_t n) {
  if (n == 0) return;
  DispatchElem(grad_type, [&](auto g) {
    using G = decltype(g);
    DispatchElem(param_type, [&](auto p) {
      using P = decltype(p);
      AdamWKernel<<<GridFor(n, kThreads), kThreads>>>(
          s, static_cast<const G*>(grad), static_cast<P*>(param), m, v, n);
    });
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void AdamWMany(const AdamWScalars& s, const AdamWSlice* slices, int count) {
  if (count > kAdamWSlices) {
    internal::DeviceCallFailure("trellis", "AdamWMany", __FILE__, __LINE__,
                                "more tensors than one launch takes");
  }
  if (count == 0) return;
  AdamWSlices packed{};
  int64_t largest = 0;
  for (int i = 0; i < count; ++i) {
    packed.slice[i] = slices[i];
    largest = std::max(largest, slices[i].n);
  }
  if (largest == 0) return;
  // Enough x blocks for the largest slice, at most 1024 (grid-stride past
  // that); blocks beyond a smaller slice's end return at once.
  const dim3 grid(std::min(GridFor(largest, kThreads), 1024u),
                  static_cast<unsigned>(count));
  AdamWManyKernel<<<grid, kThreads>>>(s, packed);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
