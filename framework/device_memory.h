// Raw memory on a device: allocate, free, copy, set. CPU memory is 64-byte
// aligned; CUDA memory comes from cudaMalloc. Failures to allocate abort with
// the size asked for (the run's memory plan is checked before allocating).
#ifndef TRELLIS_FRAMEWORK_DEVICE_MEMORY_H_
#define TRELLIS_FRAMEWORK_DEVICE_MEMORY_H_

#include <cstddef>

#include "framework/tensor.h"

namespace trellis {

void* DeviceAllocate(size_t bytes, Device device);
void DeviceFree(void* data, Device device);
void DeviceCopy(void* dst, Device dst_device, const void* src,
                Device src_device, size_t bytes);
// Copies `rows` rows of `row_bytes` bytes, read `src_pitch` bytes apart and
// written `dst_pitch` bytes apart, within `device`'s memory: a block of
// columns of a row-major matrix, as one copy (cudaMemcpy2D on a GPU).
// REQUIRES: row_bytes ≤ both pitches.
void DeviceCopyRows(void* dst, size_t dst_pitch, const void* src,
                    size_t src_pitch, size_t row_bytes, size_t rows,
                    Device device);
void DeviceMemset(void* data, Device device, int value, size_t bytes);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_DEVICE_MEMORY_H_
