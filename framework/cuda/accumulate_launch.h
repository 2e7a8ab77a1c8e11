// Internal to framework/cuda/: the launcher of accumulate.cu (see
// framework/kernels/accumulate.h), light enough for .cu and .cc files.
#ifndef TRELLIS_FRAMEWORK_CUDA_ACCUMULATE_LAUNCH_H_
#define TRELLIS_FRAMEWORK_CUDA_ACCUMULATE_LAUNCH_H_

#include <cstdint>

#include "framework/cuda/cuda_launch.h"

namespace trellis {
namespace cuda_launch {

// *total += (sum of x (n)) / divisor, on the current device's compute
// stream: one block sums in float64 (a strided pass per thread, then a
// tree in shared memory), so the order depends only on n. Does not wait.
void AccumulateSum(Elem t, const void* x, int64_t n, double divisor,
                   double* total);

}  // namespace cuda_launch
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ACCUMULATE_LAUNCH_H_
