// The CUDA twin of framework/kernels/accumulate.h.
#include "framework/kernels/accumulate.h"

#include "framework/cuda/accumulate_launch.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/tensor_checks.h"

namespace trellis {
namespace cuda {

using cuda_internal::CommonDevice;
using cuda_internal::ElemOf;

void AccumulateSum(const Tensor& x, double divisor, Tensor& total) {
  CudaDeviceGuard guard(CommonDevice("AccumulateSum", {&x, &total}));
  TRELLIS_CHECK(total.dtype() == DType::kF64 && total.numel() == 1)
      << "AccumulateSum: total must be one float64 element, not "
      << DTypeName(total.dtype()) << " with " << total.numel();
  cuda_launch::AccumulateSum(ElemOf("AccumulateSum", x), x.raw(), x.numel(),
                             divisor, total.data<double>());
}

}  // namespace cuda
}  // namespace trellis
