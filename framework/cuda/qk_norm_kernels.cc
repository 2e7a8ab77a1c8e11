// Tensor-level CUDA kernels (cuda_kernels.h) of the per-head q/k RMSNorm:
// device and dtype checks, the shapes through the check both backends share
// (framework/kernels/qk_norm.h), then the launchers (cuda_launch.h).
#include <cmath>
#include <cstdint>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/cuda/cuda_launch.h"
#include "framework/cuda/tensor_checks.h"
#include "framework/kernels/qk_norm.h"

namespace trellis {
namespace cuda {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;
using cuda_internal::RequireDType;
using kernels_internal::CheckQkNormShapes;

void QkNormForward(Tensor& qkv, int64_t heads, int64_t kv_heads,
                   const Tensor& wq, const Tensor& wk, double eps, Tensor& in,
                   Tensor& rstd) {
  const char* kernel = "QkNormForward";
  CudaDeviceGuard guard(CommonDevice(kernel, {&qkv, &wq, &wk, &in, &rstd}));
  RequireDType(kernel, qkv.dtype(), {&wq, &wk, &in});
  RequireDType(kernel, DType::kF32, {&rstd});
  TRELLIS_CHECK(eps >= 0 && std::isfinite(eps)) << kernel << ": eps " << eps;
  int64_t rows = 0;
  const int64_t d =
      CheckQkNormShapes(kernel, qkv, heads, kv_heads, in, rstd, wq, wk, &rows);
  cuda_launch::QkNormForward(
      ElemOf(kernel, qkv), qkv.raw(), rows, heads, kv_heads, d, wq.raw(),
      wk.raw(), static_cast<float>(eps), in.raw(), rstd.data<float>());
}

void QkNormBackward(Tensor& dqkv, int64_t heads, int64_t kv_heads,
                    const Tensor& in, const Tensor& rstd, const Tensor& wq,
                    const Tensor& wk, Tensor& dw) {
  const char* kernel = "QkNormBackward";
  CudaDeviceGuard guard(
      CommonDevice(kernel, {&dqkv, &in, &rstd, &wq, &wk, &dw}));
  RequireDType(kernel, dqkv.dtype(), {&in, &wq, &wk});
  RequireDType(kernel, DType::kF32, {&rstd});
  int64_t rows = 0;
  const int64_t d =
      CheckQkNormShapes(kernel, dqkv, heads, kv_heads, in, rstd, wq, wk, &rows);
  TRELLIS_CHECK(dw.numel() == 2 * d)
      << kernel << ": dw " << ShapeString(dw.shape()) << " for heads of " << d;
  TRELLIS_CHECK(dw.dtype() == DType::kF32 || dw.dtype() == dqkv.dtype())
      << kernel << ": dw " << DTypeName(dw.dtype()) << " for "
      << DTypeName(dqkv.dtype()) << " gradients (float32 or the same)";
  dw.Zero();  // the launcher adds into it
  cuda_launch::QkNormBackward(ElemOf(kernel, dqkv), dqkv.raw(), rows, heads,
                              kv_heads, d, in.raw(), rstd.data<float>(),
                              wq.raw(), wk.raw(), ElemOf(kernel, dw), dw.raw());
}

}  // namespace cuda
}  // namespace trellis
