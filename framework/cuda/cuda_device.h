// CUDA devices: how many there are, which one a rank uses, and a guard that
// makes a device current for a scope.
//
// Streams: every trellis kernel, copy and memset runs on the legacy default
// stream of its tensor's device (ComputeStream()), so work issued from one
// thread runs in issue order and host reads through Tensor::CopyFrom see
// every earlier kernel's result. Communicators that use their own streams
// order themselves against this one with events.
//
// Thread safety: all functions may be called from any thread; a guard
// changes the calling thread's current device only.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_DEVICE_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"

namespace trellis {

// The CUDA driver this build needs at least: CUDA 13.0 runs on R580
// drivers (580.65.06) and newer.
inline constexpr char kCudaDriverFloor[] = "R580 (580.65.06 or newer)";

// Whether this process is expected to see a GPU: the variable
// TRELLIS_REQUIRE_GPU is 1, or the node has NVIDIA device files
// (/dev/nvidia0, /dev/nvidiactl, ...).
bool GpuExpected();

// The number of CUDA devices this process sees. 0 when cudaGetDeviceCount
// fails or finds none and no GPU is expected (GpuExpected()), so that a
// machine without a GPU skips cleanly. When a GPU is expected, such a
// result is FailedPrecondition naming the CUDA error, the driver and
// runtime versions and kCudaDriverFloor: a driver too old for the runtime
// must fail loudly, not look like "no GPU".
absl::StatusOr<int> CudaDeviceCount();

// "CUDA driver 12.4 (cudaDriverGetVersion), runtime 13.0
// (cudaRuntimeGetVersion)", for error messages.
std::string CudaVersionReport();

// This process's rank among those on its node, from the launcher's
// environment: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), else SLURM_LOCALID
// (srun), else MPI_LOCALRANKID (MPICH/Hydra); -1 when none is set or it is
// not a non-negative integer.
int LocalRankFromEnvironment();

// The device a rank with `local_rank` uses when its node has `device_count`
// devices: local_rank mod device_count, so ranks fill the devices in turn
// and several ranks share one when there are more ranks than devices.
// REQUIRES: local_rank >= 0, device_count > 0.
int CudaDeviceForLocalRank(int local_rank, int device_count);

// Picks the device for `local_rank` (LocalRankFromEnvironment() when -1,
// which counts as 0 when unset), makes it current for the calling thread and
// returns its index. FailedPrecondition when there is no CUDA device.
absl::StatusOr<int> SelectCudaDevice(int local_rank = -1);

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", for logs.
std::string CudaDeviceDescription(int device);

// The PCI bus id of `device` ("0000:3B:00.0", cudaDeviceGetPCIBusId): the
// same in every process of the node that uses that GPU, whatever its
// CUDA_VISIBLE_DEVICES. FailedPrecondition naming the CUDA error when the
// call fails.
absl::StatusOr<std::string> CudaPciBusId(int device);

// The stream trellis kernels of `device` run on (see above).
inline cudaStream_t ComputeStream() { return nullptr; }

// Host waits, each counted by CountHostWait() (framework/host_sync.h); the
// framework blocks the host on a device only through these and the host-side
// copies of cuda_memory.h.
// Waits until all work issued to `device` has finished.
void CudaSynchronize(int device);
// Waits until the work queued on `stream` has finished.
void WaitForCudaStream(cudaStream_t stream);
// Waits until `event` has happened.
void WaitForCudaEvent(cudaEvent_t event);
// Whether `event` has happened, without waiting (not a host wait).
bool CudaEventDone(cudaEvent_t event);

// Makes `device` current for the calling thread until the end of the scope,
// then restores the previous one. On a thread that has chosen no device yet
// (neither SelectCudaDevice nor an earlier guard: a helper thread), it makes
// `device` the thread's device for good instead, since restoring the
// runtime's default, device 0, would create a context there (a rank on
// another GPU would then hold memory on GPU 0).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_DEVICE_H_
