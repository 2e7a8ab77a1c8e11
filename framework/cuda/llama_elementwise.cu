// The elementwise pieces of Llama-family blocks: SwiGLU (forward and
// backward, one thread per output column) and the rotary position embedding
// (one thread per rotated pair). float32 arithmetic for float32 and bfloat16
// tensors, each result rounded once.
#include <cuda_bf16.h>

#include <cstdint>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float g) {
  return 1.f / (1.f + expf(-g));
}

// out (N, F) = silu(gate) · up, element i = (n, f) of out.
template <typename T>
__global__ void SwiGluForwardKernel(const T* gate_up, int64_t N, int64_t F,
                                    T* out) {
  TRELLIS_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const float g = ToFloat(gate_up[n * 2 * F + f]);
    const float u = ToFloat(gate_up[n * 2 * F + F + f]);
    out[i] = FromFloat<T>(g * Sigmoid(g) * u);
  }
}

template <bool kAccumulate, typename T>
__global__ void SwiGluBackwardKernel(const T* gate_up, const T* dout, int64_t N,
                                     int64_t F, T* dgate_up) {
  TRELLIS_GRID_STRIDE(i, N * F) {
    const int64_t n = i / F, f = i % F;
    const int64_t at = n * 2 * F + f;
    const float g = ToFloat(gate_up[at]), u = ToFloat(gate_up[at + F]);
    const float d = ToFloat(dout[i]);
    const float s = Sigmoid(g);
    float grad_gate = d * u * s * (1.f + g * (1.f - s));
    float grad_up = d * g * s;
    if constexpr (kAccumulate) {
      grad_gate += ToFloat(dgate_up[at]);
      grad_up += ToFloat(dgate_up[at + F]);
    }
    dgate_up[at] = FromFloat<T>(grad_gate);
    dgate_up[at + F] = FromFloat<T>(grad_up);
  }
}

// Pair (row, head, i) of x: channels i and i + D/2 of head `head` in row
// `row`, rotated by sign · the angle of position row mod T.
template <typename T>
__global__ void RopeKernel(T* x, int64_t rows, int64_t W, int64_t Tn,
                           int64_t heads, int64_t D, const float* cos,
                           const float* sin, float sign) {
  const int64_t half = D / 2;
  TRELLIS_GRID_STRIDE(p, rows * heads * half) {
    const int64_t i = p % half, rh = p / half;
    const int64_t head = rh % heads, row = rh / heads;
    const int64_t t = row % Tn;
    T* lo = x + row * W + head * D + i;
    const float a = ToFloat(lo[0]), b = ToFloat(lo[half]);
    const float c = cos[t * half + i], s = sign * sin[t * half + i];
    lo[0] = FromFloat<T>(a * c - b * s);
    lo[half] = FromFloat<T>(b * c + a * s);
  }
}

}  // namespace

void SwiGluForward(Elem t, const void* gate_up, int64_t N, int64_t F,
                   void* out) {
  if (N * F == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    SwiGluForwardKernel<<<GridFor(N * F, kThreads), kThreads>>>(
        static_cast<const T*>(gate_up), N, F, static_cast<T*>(out));
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void SwiGluBackward(Elem t, const void* gate_up, const void* dout, int64_t N,
                    int64_t F, void* dgate_up, bool accumulate) {
  if (N * F == 0) return;
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    const auto* x = static_cast<const T*>(gate_up);
    const auto* d = static_cast<const T*>(dout);
    auto* dx = static_cast<T*>(dgate_up);
    if (accumulate) {
      SwiGluBackwardKernel<true>
          <<<GridFor(N * F, kThreads), kThreads>>>(x, d, N, F, dx);
    } else {
      SwiGluBackwardKernel<false>
          <<<GridFor(N * F, kThreads), kThreads>>>(x, d, N, F, dx);
    }
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

void Rope(Elem t, void* x, int64_t rows, int64_t W, int64_t T, int64_t heads,
          int64_t D, const float* cos, const float* sin, float sign) {
  const int64_t pairs = rows * heads * (D / 2);
  if (pairs == 0) return;
  DispatchElem(t, [&](auto tag) {
    using E = decltype(tag);
    RopeKernel<<<GridFor(pairs, kThreads), kThreads>>>(
        static_cast<E*>(x), rows, W, T, heads, D, cos, sin, sign);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
