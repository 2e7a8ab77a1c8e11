#include "framework/cuda/cuda_memory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/host_sync.h"
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

// The live and peak bytes of each device, and the size of every live
// allocation (CudaFree is not told the size).
class MemoryCounter {
 public:
  void Allocated(void* data, size_t bytes, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[data] = bytes;
    CudaMemoryStats& s = stats_[device];
    s.live_bytes += bytes;
    s.peak_bytes = std::max(s.peak_bytes, s.live_bytes);
  }
  void Freed(void* data, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = sizes_.find(data);
    if (it == sizes_.end()) return;
    stats_[device].live_bytes -= it->second;
    sizes_.erase(it);
  }
  CudaMemoryStats Get(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_[device];
  }
  void ResetPeak(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    CudaMemoryStats& s = stats_[device];
    s.peak_bytes = s.live_bytes;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  std::map<int, CudaMemoryStats> stats_;
};

// Never destroyed: tensors may be freed during static destruction.
MemoryCounter& Counter() {
  static MemoryCounter* counter = new MemoryCounter;
  return *counter;
}

}  // namespace

CudaMemoryStats GetCudaMemoryStats(int device) { return Counter().Get(device); }

void ResetCudaPeakMemory(int device) { Counter().ResetPeak(device); }

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
  Counter().Allocated(data, std::max<size_t>(bytes, 1), device);
  return data;
}

void CudaFree(void* data, int device) {
  if (data == nullptr) return;
  Counter().Freed(data, device);
  CudaDeviceGuard guard(device);
  // cudaFree waits for the device's work, as a synchronization would.
  CountHostWait();
  TRELLIS_CUDA_CHECK(cudaFree(data));
}

void CudaCopy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const int dst_device = DeviceOf(dst);
  const int src_device = DeviceOf(src);
  const int device = dst_device >= 0 ? dst_device : src_device;
  if (device < 0) {
    // Both sides on the host (pinned memory, say): no device involved.
    TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    return;
  }
  CudaDeviceGuard guard(device);
  // A host side makes cudaMemcpy wait for the device's earlier work and for
  // the copy itself; device to device it only queues.
  if (dst_device < 0 || src_device < 0) CountHostWait();
  TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void CudaCopyRows(void* dst, size_t dst_pitch, const void* src,
                  size_t src_pitch, size_t row_bytes, size_t rows) {
  if (row_bytes == 0 || rows == 0) return;
  const int dst_device = DeviceOf(dst);
  const int device = dst_device >= 0 ? dst_device : DeviceOf(src);
  TRELLIS_CHECK(device >= 0) << "CudaCopyRows copies device memory";
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes,
                                  rows, cudaMemcpyDeviceToDevice));
}

void CudaCopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CountHostWait();
  TRELLIS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void CudaCopyToDeviceAsync(void* dst, const void* src, size_t bytes,
                           int device) {
  if (bytes == 0) return;
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                     ComputeStream()));
}

void* CudaHostAllocate(size_t bytes) {
  void* data = nullptr;
  TRELLIS_CUDA_CHECK(cudaMallocHost(&data, std::max<size_t>(bytes, 1)));
  return data;
}

void CudaHostFree(void* data) {
  if (data != nullptr) TRELLIS_CUDA_CHECK(cudaFreeHost(data));
}

void CudaMemset(void* data, int value, size_t bytes) {
  if (bytes == 0) return;
  const int device = DeviceOf(data);
  TRELLIS_CHECK_GE(device, 0) << "CudaMemset on host memory ";
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaMemset(data, value, bytes));
}

}  // namespace trellis
