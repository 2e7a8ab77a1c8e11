// Raw CUDA memory for framework/device_memory.cc: allocate, free, copy and
// set device bytes. Every call is checked (framework/cuda/cuda_check.h) and
// aborts naming the call, its file:line and the rank.
//
// Ordering: copies and sets run on the legacy default stream of the device
// that holds the memory, after every kernel issued there before them.
// CudaCopy returns once the bytes have landed when either side is host
// memory (a host wait, counted: framework/host_sync.h); device-to-device
// copies are ordered on that stream. CudaCopyAsync never waits.
//
// Thread safety: callable from any thread; the current device is restored.
// The byte counts are updated under a lock.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_MEMORY_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_MEMORY_H_

#include <cstddef>

namespace trellis {

// `bytes` (at least one byte is reserved, so the pointer is never null) on
// device `device`. Aborts with the size asked for and the free memory when
// the device is out of memory.
void* CudaAllocate(size_t bytes, int device);
// Frees what CudaAllocate returned. Null is ignored. cudaFree waits for the
// device's queued work, so it counts as a host wait (framework/host_sync.h):
// a step that frees outside the memory arena shows in the count.
void CudaFree(void* data, int device);
// Copies between any two of host memory and device memory (unified
// addressing decides the direction). With a host side it blocks the host:
// one counted host wait.
void CudaCopy(void* dst, const void* src, size_t bytes);
// Copies `rows` rows of `row_bytes` bytes between device memory rows
// `src_pitch` and `dst_pitch` bytes apart (cudaMemcpy2D); queued on the
// memory's device, ordered like CudaCopy's device-to-device copies.
void CudaCopyRows(void* dst, size_t dst_pitch, const void* src,
                  size_t src_pitch, size_t row_bytes, size_t rows);
// Copies `bytes` of device memory of the current device to host memory
// `dst`, after the work queued before: one counted host wait.
void CudaCopyToHost(void* dst, const void* src, size_t bytes);
// Queues a copy from pinned host memory `src` to device memory `dst` of
// `device` on its compute stream and returns at once; `src` must stay
// unchanged until the copy has run (record an event after it).
void CudaCopyToDeviceAsync(void* dst, const void* src, size_t bytes,
                           int device);
// Page-locked host memory (cudaMallocHost), which CudaCopyToDeviceAsync
// reads without staging; freed with CudaHostFree (null is ignored).
void* CudaHostAllocate(size_t bytes);
void CudaHostFree(void* data);
// Sets `bytes` bytes of device memory to `value`.
void CudaMemset(void* data, int value, size_t bytes);

// Bytes of one device held through CudaAllocate: what is live now, and the
// most that was live at once since the process started or the last
// ResetCudaPeakMemory. They count the bytes asked for, not the driver's
// rounding, nor memory taken around CudaAllocate (cuBLAS workspaces,
// stream-ordered scratch, NCCL buffers, the CUDA context).
struct CudaMemoryStats {
  size_t live_bytes = 0;
  size_t peak_bytes = 0;
};
CudaMemoryStats GetCudaMemoryStats(int device);
// Sets the peak of `device` to its live bytes.
void ResetCudaPeakMemory(int device);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_MEMORY_H_
