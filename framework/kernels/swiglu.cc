#include "framework/kernels/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {
namespace {

using kernels_internal::DispatchFloat;
using kernels_internal::ExpShiftScale;
using kernels_internal::RequireCpu;
using kernels_internal::RequireDType;

// Elements per chunk: the exponentials of a chunk go through the array exp
// (vectorized for float) in a stack buffer.
constexpr int64_t kChunk = 256;

// sig (len) = sigmoid(g) = 1 / (1 + exp(-g)). For g below -88, exp(-g)
// saturates (float) and sigmoid is 0 to float precision, as it should be.
template <typename T>
void Sigmoid(const T* g, int64_t len, T* sig) {
  for (int64_t j = 0; j < len; ++j) sig[j] = -g[j];
  ExpShiftScale(sig, T{0}, T{1}, len, sig);
  for (int64_t j = 0; j < len; ++j) sig[j] = T{1} / (T{1} + sig[j]);
}

// out (N, F) = silu(gate) · up over gate_up (N, 2F).
template <typename T>
void SwiGluForwardCpu(const T* gate_up, int64_t N, int64_t F, T* out) {
  T sig[kChunk];
  for (int64_t i = 0; i < N; ++i) {
    const T* g = gate_up + i * 2 * F;
    const T* u = g + F;
    T* o = out + i * F;
    for (int64_t f0 = 0; f0 < F; f0 += kChunk) {
      const int64_t len = std::min(kChunk, F - f0);
      Sigmoid(g + f0, len, sig);
      for (int64_t j = 0; j < len; ++j) {
        o[f0 + j] = g[f0 + j] * sig[j] * u[f0 + j];
      }
    }
  }
}

// dgate_up (N, 2F) (+)= [dout · up · silu'(gate) | dout · silu(gate)].
template <bool kAccumulate, typename T>
void SwiGluBackwardCpu(const T* gate_up, const T* dout, int64_t N, int64_t F,
                       T* dgate_up) {
  T sig[kChunk];
  for (int64_t i = 0; i < N; ++i) {
    const T* g = gate_up + i * 2 * F;
    const T* u = g + F;
    const T* d = dout + i * F;
    T* dg = dgate_up + i * 2 * F;
    T* du = dg + F;
    for (int64_t f0 = 0; f0 < F; f0 += kChunk) {
      const int64_t len = std::min(kChunk, F - f0);
      Sigmoid(g + f0, len, sig);
      for (int64_t j = 0; j < len; ++j) {
        const int64_t f = f0 + j;
        const T s = sig[j];
        const T grad_gate = d[f] * u[f] * s * (T{1} + g[f] * (T{1} - s));
        const T grad_up = d[f] * g[f] * s;
        if constexpr (kAccumulate) {
          dg[f] += grad_gate;
          du[f] += grad_up;
        } else {
          dg[f] = grad_gate;
          du[f] = grad_up;
        }
      }
    }
  }
}

struct Dims {
  int64_t N, F;
};

// Checks gate_up (..., 2F) against `rows` (..., F) and returns (N, F).
Dims CheckShapes(const char* kernel, const Tensor& gate_up,
                 std::initializer_list<const Tensor*> rows) {
  TRELLIS_CHECK(gate_up.ndim() >= 1 && gate_up.dim(-1) % 2 == 0)
      << kernel << ": gate_up " << ShapeString(gate_up.shape())
      << " has no [gate | up] column halves";
  const int64_t F = gate_up.dim(-1) / 2;
  Shape row_shape = gate_up.shape();
  row_shape.back() = F;
  for (const Tensor* r : rows) {
    TRELLIS_CHECK(r->shape() == row_shape)
        << kernel << ": " << ShapeString(r->shape()) << ", expected "
        << ShapeString(row_shape) << " for gate_up "
        << ShapeString(gate_up.shape());
  }
  return Dims{F == 0 ? 0 : gate_up.numel() / (2 * F), F};
}

template <bool kAccumulate>
void Backward(const char* kernel, const Tensor& gate_up, const Tensor& dout,
              Tensor& dgate_up) {
  RequireCpu(kernel, {&gate_up, &dout, &dgate_up});
  RequireDType(kernel, gate_up.dtype(), {&dout, &dgate_up});
  const Dims d = CheckShapes(kernel, gate_up, {&dout});
  TRELLIS_CHECK(dgate_up.shape() == gate_up.shape())
      << kernel << ": dgate_up " << ShapeString(dgate_up.shape())
      << ", gate_up " << ShapeString(gate_up.shape());
  TRELLIS_CHECK(dgate_up.numel() == 0 || (dgate_up.raw() != gate_up.raw() &&
                                          dgate_up.raw() != dout.raw()))
      << kernel << ": dgate_up aliases gate_up or dout";
  DispatchFloat(kernel, gate_up.dtype(), [&](auto tag) {
    using T = decltype(tag);
    SwiGluBackwardCpu<kAccumulate>(gate_up.data<T>(), dout.data<T>(), d.N, d.F,
                                   dgate_up.data<T>());
  });
}

}  // namespace

void SwiGluForward(const Tensor& gate_up, Tensor& out) {
  const char* kernel = "SwiGluForward";
  TRELLIS_CUDA_DISPATCH(cuda::SwiGluForward(gate_up, out), &gate_up, &out);
  RequireCpu(kernel, {&gate_up, &out});
  RequireDType(kernel, gate_up.dtype(), {&out});
  const Dims d = CheckShapes(kernel, gate_up, {&out});
  DispatchFloat(kernel, gate_up.dtype(), [&](auto tag) {
    using T = decltype(tag);
    SwiGluForwardCpu(gate_up.data<T>(), d.N, d.F, out.data<T>());
  });
}

void SwiGluBackward(const Tensor& gate_up, const Tensor& dout,
                    Tensor& dgate_up) {
  TRELLIS_CUDA_DISPATCH(cuda::SwiGluBackward(gate_up, dout, dgate_up), &gate_up,
                        &dout, &dgate_up);
  Backward<true>("SwiGluBackward", gate_up, dout, dgate_up);
}

void SwiGluBackwardWrite(const Tensor& gate_up, const Tensor& dout,
                         Tensor& dgate_up) {
  TRELLIS_CUDA_DISPATCH(cuda::SwiGluBackwardWrite(gate_up, dout, dgate_up),
                        &gate_up, &dout, &dgate_up);
  Backward<false>("SwiGluBackwardWrite", gate_up, dout, dgate_up);
}

}  // namespace trellis
