// The device a run computes on, chosen by name, and how much memory it has:
// the backend-neutral face of framework/cuda/cuda_device.h, usable in builds
// without CUDA.
#ifndef TRELLIS_FRAMEWORK_DEVICE_INFO_H_
#define TRELLIS_FRAMEWORK_DEVICE_INFO_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

// kCPU: the host. kCUDA: the GPU of this rank's local rank (see
// SelectCudaDevice), made current for the calling thread. FailedPrecondition
// when the build has no CUDA backend or no GPU is visible.
absl::StatusOr<Device> SelectDevice(DeviceType type);

// CUDA devices visible to this process (0 in a build without CUDA). An
// error when a GPU is expected but CUDA finds none (see CudaDeviceCount in
// framework/cuda/cuda_device.h: the error names the CUDA error, the driver
// and runtime versions and the driver this build needs).
absl::StatusOr<int> VisibleCudaDevices();

// The physical GPU behind `device`, named the same in every process of the
// node that uses it whatever its CUDA_VISIBLE_DEVICES: its PCI bus id
// ("0000:3B:00.0", see CudaPciBusId), which is also how NCCL tells two
// ranks' GPUs apart. FailedPrecondition for the host, in a build without
// CUDA, or when CUDA cannot name the device.
absl::StatusOr<std::string> PhysicalGpuId(Device device);

// Bytes a run may still allocate on `device`: the free memory of a GPU, the
// physical memory of the host.
size_t DeviceMemoryAvailable(Device device);

// "cpu" or the GPU's name, compute capability and memory, for logs.
std::string DeviceDescription(Device device);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_DEVICE_INFO_H_
