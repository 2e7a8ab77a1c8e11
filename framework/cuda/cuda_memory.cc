#include "framework/cuda/cuda_memory.h"

#include <algorithm>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/status.h"

namespace trellis {
namespace {

// The device that holds `pointer`, or -1 for host memory.
int DeviceOf(const void* pointer) {
  cudaPointerAttributes attributes;
  TRELLIS_CUDA_CHECK(cudaPointerGetAttributes(&attributes, pointer));
  if (attributes.type == cudaMemoryTypeDevice ||
      attributes.type == cudaMemoryTypeManaged) {
    return attributes.device;
  }
  return -1;
}

}  // namespace

void* CudaAllocate(size_t bytes, int device) {
  CudaDeviceGuard guard(device);
  void* data = nullptr;
  const cudaError_t error = cudaMalloc(&data, std::max<size_t>(bytes, 1));
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    TRELLIS_CHECK(false) << "out of memory on cuda:" << device << " allocating "
                         << bytes << " bytes (" << free_bytes << " of "
                         << total_bytes << " bytes free)";
  }
  if (error != cudaSuccess) {
    internal::DeviceCallFailure("CUDA", "cudaMalloc", __FILE__, __LINE__,
                                cudaGetErrorString(error));
  }
  return data;
}

void CudaFree(void* data, int device) {
  if (data == nullptr) return;
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaFree(data));
}

void CudaCopy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  int device = DeviceOf(dst);
  if (device < 0) device = DeviceOf(src);
  if (device < 0) {
    // Both sides on the host (pinned memory, say): no device involved.
    TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    return;
  }
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void CudaMemset(void* data, int value, size_t bytes) {
  if (bytes == 0) return;
  const int device = DeviceOf(data);
  TRELLIS_CHECK_GE(device, 0) << "CudaMemset on host memory ";
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaMemset(data, value, bytes));
}

}  // namespace trellis
