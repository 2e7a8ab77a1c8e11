// Device-side running totals of whole-tensor sums (accumulate_launch.h).
#include <cstdint>

#include "framework/cuda/accumulate_launch.h"
#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

constexpr int kAccumulateThreads = 512;

template <typename T>
__global__ void AccumulateSumKernel(const T* __restrict__ x, int64_t n,
                                    double divisor, double* total) {
  __shared__ double partial[kAccumulateThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kAccumulateThreads) {
    sum += static_cast<double>(ToFloat(x[i]));
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kAccumulateThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *total += partial[0] / divisor;
}

}  // namespace

void AccumulateSum(Elem t, const void* x, int64_t n, double divisor,
                   double* total) {
  DispatchElem(t, [&](auto tag) {
    using T = decltype(tag);
    AccumulateSumKernel<<<1, kAccumulateThreads>>>(static_cast<const T*>(x), n,
                                                   divisor, total);
  });
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
