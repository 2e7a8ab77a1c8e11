// Host waits: the places where the host blocks until a device has finished
// queued work (a device-to-host read, a stream, event or device
// synchronization, a blocking copy with a host side). Each one is counted
// on the calling thread, so tests can hold a training step to a budget of
// waits on any device.
//
// Who counts: on CUDA the wrappers in framework/cuda/ (CudaCopy with a host
// side, CudaCopyToHost, CudaSynchronize, WaitForCudaStream,
// WaitForCudaEvent); on the CPU the framework entry points that would wait
// on a device (ReadToHost, WaitForDevice and the kernels that return a
// host value: Sum, SumOfSquares). So the same call sites count once each in
// a CPU build and in a CUDA build. Waits inside libraries that trellis does
// not wrap (NCCL's own blocking calls) are not counted.
//
// Thread safety: the counter is per thread; every function may be called
// from any thread and sees only that thread's count.
#ifndef TRELLIS_FRAMEWORK_HOST_SYNC_H_
#define TRELLIS_FRAMEWORK_HOST_SYNC_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

// Counts one host wait on the calling thread.
void CountHostWait();
// Host waits counted on the calling thread since it started or since its
// last ResetHostWaits().
int64_t HostWaits();
void ResetHostWaits();

// A host copy of `t` (any device), taken after the device has finished the
// work queued before: one counted host wait on every device.
Tensor ReadToHost(const Tensor& t);

// host (a CPU tensor of src's shape and dtype) = src, copied after the
// device has finished the work queued before: one counted host wait on
// every device, without allocating.
void CopyToHost(const Tensor& src, Tensor& host);

// Waits until all work queued on `device` has finished: one counted host
// wait on every device (the CPU has none to wait for).
void WaitForDevice(Device device);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_HOST_SYNC_H_
