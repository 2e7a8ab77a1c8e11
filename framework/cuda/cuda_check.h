// Check macros for CUDA runtime calls, and the reporter that the cuBLAS
// (framework/cuda/matmul.cc) and NCCL (parallel/nccl_communicator.cc) check
// macros share.
//
//   TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
//   TRELLIS_CUDA_CHECK_LAUNCH();        // after a kernel launch
//
// A failing call prints "CUDA error: <call> failed at <file>:<line> (<rank
// context>): <library's message>" to stderr and aborts the process (under
// mpirun that ends the job). The rank context is trellis::ErrorContext().
// A failure here is an invariant failure or a broken device, never something
// a user can correct by retrying, so it does not travel as a Status.
//
// This header is light (no Abseil) so that .cu files can include it.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_CHECK_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "framework/launch_count.h"

namespace trellis {
namespace internal {

// Prints the failure (library: "CUDA", "cuBLAS", "NCCL", ...) and aborts.
[[noreturn]] void DeviceCallFailure(const char* library, const char* call,
                                    const char* file, int line,
                                    const char* message);

}  // namespace internal
}  // namespace trellis

#define TRELLIS_CUDA_CHECK(call)                    \
  do {                                              \
    const cudaError_t _trellis_cuda_error = (call); \
    if (_trellis_cuda_error != cudaSuccess) {       \
      ::trellis::internal::DeviceCallFailure(       \
          "CUDA", #call, __FILE__, __LINE__,        \
          cudaGetErrorString(_trellis_cuda_error)); \
    }                                               \
  } while (0)

// Checks the launch of the kernel just issued (bad configuration, no device
// code for this GPU's architecture).
// It also counts the launch for an active LaunchCounter
// (framework/launch_count.h), so it must follow every launch exactly once.
#define TRELLIS_CUDA_CHECK_LAUNCH()         \
  do {                                      \
    ::trellis::CountLaunches(1);            \
    TRELLIS_CUDA_CHECK(cudaGetLastError()); \
  } while (0)

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_CHECK_H_
