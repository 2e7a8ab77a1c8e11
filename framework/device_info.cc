#include "framework/device_info.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

#ifdef TRELLIS_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#endif

namespace trellis {

absl::StatusOr<Device> SelectDevice(DeviceType type) {
  if (type == DeviceType::kCPU) return Device::Cpu();
#ifdef TRELLIS_WITH_CUDA
  TRELLIS_ASSIGN_OR_RETURN(int index, SelectCudaDevice());
  return Device::Cuda(index);
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA backend; rebuild on a machine "
      "with nvcc (see docs/gpu.md) or use --device=cpu");
#endif
}

absl::StatusOr<int> VisibleCudaDevices() {
#ifdef TRELLIS_WITH_CUDA
  return CudaDeviceCount();
#else
  return 0;
#endif
}

absl::StatusOr<std::string> PhysicalGpuId(Device device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        absl::StrCat(DeviceName(device), " is not a GPU"));
  }
#ifdef TRELLIS_WITH_CUDA
  return CudaPciBusId(device.index);
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA backend; rebuild on a machine with nvcc (see "
      "docs/gpu.md)");
#endif
}

size_t DeviceMemoryAvailable(Device device) {
#ifdef TRELLIS_WITH_CUDA
  if (device.is_cuda()) {
    CudaDeviceGuard guard(device.index);
    size_t free = 0, total = 0;
    TRELLIS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
#endif
  return static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
}

std::string DeviceDescription(Device device) {
#ifdef TRELLIS_WITH_CUDA
  if (device.is_cuda()) return CudaDeviceDescription(device.index);
#endif
  return DeviceName(device);
}

}  // namespace trellis
