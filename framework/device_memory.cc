#include "framework/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "framework/launch_count.h"

#if defined(TRELLIS_WITH_CUDA)
#include "framework/cuda/cuda_memory.h"
#endif

namespace trellis {

void* DeviceAllocate(size_t bytes, Device device) {
  if (device.is_cuda()) {
#if defined(TRELLIS_WITH_CUDA)
    return CudaAllocate(bytes, device.index);
#else
    TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
#endif
  }
  const size_t rounded = ((bytes + 63) / 64) * 64;
  void* data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  TRELLIS_CHECK(data != nullptr)
      << "out of host memory allocating " << bytes << " bytes";
  return data;
}

void DeviceFree(void* data, Device device) {
  if (device.is_cuda()) {
#if defined(TRELLIS_WITH_CUDA)
    CudaFree(data, device.index);
#endif
    return;
  }
  std::free(data);
}

void DeviceCopy(void* dst, Device dst_device, const void* src,
                Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    // A CPU copy stands for the device copy it would be on a GPU.
    if (!InsideCpuKernel()) CountLaunches(1);
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(TRELLIS_WITH_CUDA)
  CountLaunches(1);
  CudaCopy(dst, src, bytes);
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
#endif
}

void DeviceCopyRows(void* dst, size_t dst_pitch, const void* src,
                    size_t src_pitch, size_t row_bytes, size_t rows,
                    Device device) {
  if (row_bytes == 0 || rows == 0) return;
  TRELLIS_CHECK(row_bytes <= dst_pitch && row_bytes <= src_pitch)
      << "rows of " << row_bytes << " bytes with pitches " << dst_pitch
      << " and " << src_pitch;
  if (device.is_cpu()) {
    if (!InsideCpuKernel()) CountLaunches(1);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                  static_cast<const char*>(src) + r * src_pitch, row_bytes);
    }
    return;
  }
#if defined(TRELLIS_WITH_CUDA)
  CountLaunches(1);
  CudaCopyRows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
#endif
}

void DeviceMemset(void* data, Device device, int value, size_t bytes) {
  if (device.is_cpu()) {
    if (!InsideCpuKernel()) CountLaunches(1);
    std::memset(data, value, bytes);
    return;
  }
#if defined(TRELLIS_WITH_CUDA)
  CountLaunches(1);
  CudaMemset(data, value, bytes);
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
#endif
}

}  // namespace trellis
