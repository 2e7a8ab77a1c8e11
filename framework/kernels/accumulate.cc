#include "framework/kernels/accumulate.h"

#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/cpu_common.h"

namespace trellis {

using kernels_internal::DispatchFloat;
using kernels_internal::RequireCpu;
using kernels_internal::SumLanes;

void AccumulateSum(const Tensor& x, double divisor, Tensor& total) {
  TRELLIS_CUDA_DISPATCH(cuda::AccumulateSum(x, divisor, total), &x, &total);
  RequireCpu("AccumulateSum", {&x, &total});
  TRELLIS_CHECK(total.dtype() == DType::kF64 && total.numel() == 1)
      << "AccumulateSum: total must be one float64 element, not "
      << DTypeName(total.dtype()) << " with " << total.numel();
  double sum = 0;
  DispatchFloat("AccumulateSum", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sum = SumLanes<double>(x.data<T>(), x.numel());
  });
  total.data<double>()[0] += sum / divisor;
}

}  // namespace trellis
