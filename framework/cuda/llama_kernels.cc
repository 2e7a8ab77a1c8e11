// Tensor-level CUDA kernels (cuda_kernels.h) of Llama-family blocks: RMSNorm
// (alone and after a residual add), SwiGLU and the rotary position
// embedding. Each checks devices, dtypes and shapes, makes the tensors'
// device current and calls its launcher (cuda_launch.h).
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"

namespace trellis {
namespace cuda {
namespace {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;
using cuda_internal::Rows;

// Checks x (N, C) against `other` (same shape), the (C) weight, rstd (N)
// float32.
void CheckRmsNorm(const char* kernel, const Tensor& x, const Tensor& other,
                  const Tensor& w, const Tensor& rstd) {
  TRELLIS_CHECK(x.ndim() >= 1 && x.shape() == other.shape())
      << kernel << ": " << ShapeString(x.shape()) << " vs "
      << ShapeString(other.shape());
  TRELLIS_CHECK(w.ndim() == 1 && w.dim(0) == x.dim(-1))
      << kernel << ": x " << ShapeString(x.shape()) << ", weight "
      << ShapeString(w.shape());
  TRELLIS_CHECK(rstd.numel() == Rows(x))
      << kernel << ": x " << ShapeString(x.shape()) << ", rstd "
      << ShapeString(rstd.shape());
  RequireDType(kernel, DType::kF32, {&rstd});
}

float Eps(const char* kernel, double eps) {
  TRELLIS_CHECK(eps >= 0 && std::isfinite(eps)) << kernel << ": eps " << eps;
  return static_cast<float>(eps);
}

// Checks gate_up (..., 2F) against `rows` (..., F); returns (N, F).
struct GluDims {
  int64_t N, F;
};
GluDims CheckSwiGlu(const char* kernel, const Tensor& gate_up,
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
        << ShapeString(row_shape);
  }
  return GluDims{F == 0 ? 0 : gate_up.numel() / (2 * F), F};
}

void SwiGluBackwardImpl(const char* kernel, const Tensor& gate_up,
                        const Tensor& dout, Tensor& dgate_up, bool accumulate) {
  CudaDeviceGuard guard(CommonDevice(kernel, {&gate_up, &dout, &dgate_up}));
  RequireDType(kernel, gate_up.dtype(), {&dout, &dgate_up});
  const GluDims d = CheckSwiGlu(kernel, gate_up, {&dout});
  TRELLIS_CHECK(dgate_up.shape() == gate_up.shape())
      << kernel << ": dgate_up " << ShapeString(dgate_up.shape());
  TRELLIS_CHECK(dgate_up.numel() == 0 || (dgate_up.raw() != gate_up.raw() &&
                                          dgate_up.raw() != dout.raw()))
      << kernel << ": dgate_up aliases gate_up or dout";
  cuda_launch::SwiGluBackward(ElemOf(kernel, gate_up), gate_up.raw(),
                              dout.raw(), d.N, d.F, dgate_up.raw(), accumulate);
}

void RopeImpl(const char* kernel, Tensor& x, int64_t n_head, int64_t n_kv_head,
              const Tensor& cos, const Tensor& sin, float sign) {
  CudaDeviceGuard guard(CommonDevice(kernel, {&x, &cos, &sin}));
  RequireDType(kernel, DType::kF32, {&cos, &sin});
  TRELLIS_CHECK(n_head > 0 && n_kv_head > 0)
      << kernel << ": " << n_head << " heads, " << n_kv_head << " kv heads";
  const int64_t parts = n_head + 2 * n_kv_head;
  TRELLIS_CHECK(x.ndim() >= 2 && x.dim(-1) % parts == 0 &&
                (x.dim(-1) / parts) % 2 == 0)
      << kernel << ": qkv " << ShapeString(x.shape()) << " is not " << parts
      << " heads of an even width";
  const int64_t W = x.dim(-1), T = x.dim(-2), D = W / parts;
  TRELLIS_CHECK(cos.ndim() == 2 && cos.shape() == sin.shape() &&
                cos.dim(1) == D / 2 && cos.dim(0) >= T)
      << kernel << ": tables " << ShapeString(cos.shape()) << " and "
      << ShapeString(sin.shape()) << " for qkv " << ShapeString(x.shape());
  cuda_launch::Rope(ElemOf(kernel, x), x.raw(), Rows(x), W, T,
                    n_head + n_kv_head, D, cos.data<float>(), sin.data<float>(),
                    sign);
}

}  // namespace

void RmsNormForward(const Tensor& x, const Tensor& w, double eps, Tensor& out,
                    Tensor& rstd) {
  const char* kernel = "RmsNormForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&x, &w, &out, &rstd}));
  RequireDType(kernel, x.dtype(), {&w, &out});
  CheckRmsNorm(kernel, x, out, w, rstd);
  cuda_launch::RmsNormForward(ElemOf(kernel, x), x.raw(), w.raw(), Rows(x),
                              x.dim(-1), Eps(kernel, eps), out.raw(),
                              rstd.data<float>());
}

void AddRmsNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                       double eps, Tensor& sum, Tensor& out, Tensor& rstd) {
  const char* kernel = "AddRmsNormForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&a, &b, &w, &sum, &out, &rstd}));
  RequireDType(kernel, a.dtype(), {&b, &w, &sum, &out});
  CheckRmsNorm(kernel, a, out, w, rstd);
  TRELLIS_CHECK(b.shape() == a.shape() && sum.shape() == a.shape())
      << kernel << ": a " << ShapeString(a.shape()) << ", b "
      << ShapeString(b.shape()) << ", sum " << ShapeString(sum.shape());
  TRELLIS_CHECK(sum.numel() == 0 || sum.raw() != out.raw())
      << kernel << ": out would overwrite sum";
  cuda_launch::AddRmsNormForward(ElemOf(kernel, a), a.raw(), b.raw(), w.raw(),
                                 Rows(a), a.dim(-1), Eps(kernel, eps),
                                 sum.raw(), out.raw(), rstd.data<float>());
}

void RmsNormBackwardInput(const Tensor& dout, const Tensor& x, const Tensor& w,
                          const Tensor& rstd, Tensor& dx) {
  const char* kernel = "RmsNormBackwardInput";
  CudaDeviceGuard guard(CommonDevice(kernel, {&dout, &x, &w, &rstd, &dx}));
  RequireDType(kernel, x.dtype(), {&dout, &w, &dx});
  CheckRmsNorm(kernel, x, dout, w, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape());
  cuda_launch::RmsNormBackwardInput(ElemOf(kernel, x), dout.raw(), x.raw(),
                                    w.raw(), rstd.data<float>(), Rows(x),
                                    x.dim(-1), dx.raw(), dx.raw());
}

void RmsNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd,
                                  const Tensor& residual, Tensor& dx) {
  const char* kernel = "RmsNormBackwardInputResidual";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dout, &x, &w, &rstd, &residual, &dx}));
  RequireDType(kernel, x.dtype(), {&dout, &w, &residual, &dx});
  CheckRmsNorm(kernel, x, dout, w, rstd);
  TRELLIS_CHECK(dx.shape() == x.shape() && residual.shape() == x.shape())
      << kernel << " dx " << ShapeString(dx.shape()) << ", residual "
      << ShapeString(residual.shape());
  TRELLIS_CHECK(dx.numel() == 0 ||
                (dx.raw() != dout.raw() && dx.raw() != x.raw()))
      << kernel << ": dx aliases dout or x";
  cuda_launch::RmsNormBackwardInput(ElemOf(kernel, x), dout.raw(), x.raw(),
                                    w.raw(), rstd.data<float>(), Rows(x),
                                    x.dim(-1), residual.raw(), dx.raw());
}

void RmsNormBackwardWeight(const Tensor& dout, const Tensor& x,
                           const Tensor& rstd, Tensor& dw) {
  const char* kernel = "RmsNormBackwardWeight";
  CudaDeviceGuard guard(CommonDevice(kernel, {&dout, &x, &rstd, &dw}));
  RequireDType(kernel, x.dtype(), {&dout});
  CheckRmsNorm(kernel, x, dout, dw, rstd);
  cuda_launch::RmsNormBackwardWeight(ElemOf(kernel, x), dout.raw(), x.raw(),
                                     rstd.data<float>(), Rows(x), x.dim(-1),
                                     ElemOf(kernel, dw), dw.raw());
}

void SwiGluForward(const Tensor& gate_up, Tensor& out) {
  const char* kernel = "SwiGluForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&gate_up, &out}));
  RequireDType(kernel, gate_up.dtype(), {&out});
  const GluDims d = CheckSwiGlu(kernel, gate_up, {&out});
  cuda_launch::SwiGluForward(ElemOf(kernel, gate_up), gate_up.raw(), d.N, d.F,
                             out.raw());
}

void SwiGluBackward(const Tensor& gate_up, const Tensor& dout,
                    Tensor& dgate_up) {
  SwiGluBackwardImpl("SwiGluBackward", gate_up, dout, dgate_up, true);
}

void SwiGluBackwardWrite(const Tensor& gate_up, const Tensor& dout,
                         Tensor& dgate_up) {
  SwiGluBackwardImpl("SwiGluBackwardWrite", gate_up, dout, dgate_up, false);
}

void RopeForward(Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 const Tensor& cos, const Tensor& sin) {
  RopeImpl("RopeForward", qkv, n_head, n_kv_head, cos, sin, 1.f);
}

void RopeBackward(Tensor& dqkv, int64_t n_head, int64_t n_kv_head,
                  const Tensor& cos, const Tensor& sin) {
  RopeImpl("RopeBackward", dqkv, n_head, n_kv_head, cos, sin, -1.f);
}

}  // namespace cuda
}  // namespace trellis
