#include "framework/cuda/cuda_device.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "framework/cuda/cuda_check.h"
#include "framework/host_sync.h"
#include "framework/status.h"

namespace trellis {
namespace {

// Whether this thread has chosen a device (SelectCudaDevice, or a
// CudaDeviceGuard it ran without one).
thread_local bool thread_chose_device = false;

// A non-negative integer from the environment, or -1.
int EnvRank(const char* name) {
  const char* text = std::getenv(name);
  int value = -1;
  if (text == nullptr || !absl::SimpleAtoi(text, &value) || value < 0) {
    return -1;
  }
  return value;
}

// "12.4" from CUDA's 12040; "none" for 0 (no driver).
std::string CudaVersionText(int version) {
  if (version <= 0) return "none";
  return absl::StrFormat("%d.%d", version / 1000, (version % 1000) / 10);
}

// Does the node have NVIDIA device files?
bool NvidiaDeviceFilesExist() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    if (entry.path().filename().string().starts_with("nvidia")) return true;
  }
  return false;
}

}  // namespace

bool GpuExpected() {
  const char* require = std::getenv("TRELLIS_REQUIRE_GPU");
  if (require != nullptr && std::string(require) == "1") return true;
  return NvidiaDeviceFilesExist();
}

std::string CudaVersionReport() {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  cudaGetLastError();
  return absl::StrFormat(
      "CUDA driver %s (cudaDriverGetVersion %d), runtime %s "
      "(cudaRuntimeGetVersion %d)",
      CudaVersionText(driver), driver, CudaVersionText(runtime), runtime);
}

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clears the sticky error
    count = 0;
  }
  if (count > 0 || !GpuExpected()) return count;
  const std::string found =
      error == cudaSuccess
          ? std::string("cudaGetDeviceCount found 0 devices")
          : absl::StrFormat("cudaGetDeviceCount failed: %s (%s)",
                            cudaGetErrorName(error), cudaGetErrorString(error));
  return absl::FailedPreconditionError(absl::StrFormat(
      "a GPU is expected (TRELLIS_REQUIRE_GPU=1 or /dev/nvidia* exists) but "
      "%s; %s; this build needs an NVIDIA driver %s: update the driver, "
      "check CUDA_VISIBLE_DEVICES, or unset TRELLIS_REQUIRE_GPU",
      found, CudaVersionReport(), kCudaDriverFloor));
}

int LocalRankFromEnvironment() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const int rank = EnvRank(name);
    if (rank >= 0) return rank;
  }
  return -1;
}

int CudaDeviceForLocalRank(int local_rank, int device_count) {
  TRELLIS_CHECK(local_rank >= 0 && device_count > 0)
      << "local rank " << local_rank << ", " << device_count << " devices";
  return local_rank % device_count;
}

absl::StatusOr<int> SelectCudaDevice(int local_rank) {
  TRELLIS_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device is visible to this process; run on a GPU node, check "
        "CUDA_VISIBLE_DEVICES, or use --device=cpu");
  }
  if (local_rank < 0) local_rank = LocalRankFromEnvironment();
  if (local_rank < 0) local_rank = 0;
  const int device = CudaDeviceForLocalRank(local_rank, count);
  TRELLIS_CUDA_CHECK(cudaSetDevice(device));
  thread_chose_device = true;
  return device;
}

std::string CudaDeviceDescription(int device) {
  cudaDeviceProp prop;
  TRELLIS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return absl::StrFormat(
      "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

absl::StatusOr<std::string> CudaPciBusId(int device) {
  char bus_id[32] = {};  // "dddd:bb:dd.f" and its terminator fit
  const cudaError_t error =
      cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clears the sticky error
    return absl::FailedPreconditionError(absl::StrFormat(
        "cudaDeviceGetPCIBusId(cuda:%d) failed: %s (%s)", device,
        cudaGetErrorName(error), cudaGetErrorString(error)));
  }
  return std::string(bus_id);
}

void CudaSynchronize(int device) {
  CudaDeviceGuard guard(device);
  CountHostWait();
  TRELLIS_CUDA_CHECK(cudaDeviceSynchronize());
}

void WaitForCudaStream(cudaStream_t stream) {
  CountHostWait();
  TRELLIS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void WaitForCudaEvent(cudaEvent_t event) {
  CountHostWait();
  TRELLIS_CUDA_CHECK(cudaEventSynchronize(event));
}

bool CudaEventDone(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the event is pending
    return false;
  }
  TRELLIS_CUDA_CHECK(status);
  return true;
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
  if (!thread_chose_device) {
    // A thread that never chose a device (a monitor or I/O helper):
    // cudaGetDevice would answer 0 and restoring 0 would create a context
    // on device 0 for nothing, so the thread keeps this device.
    TRELLIS_CUDA_CHECK(cudaSetDevice(device));
    thread_chose_device = true;
    return;
  }
  TRELLIS_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TRELLIS_CUDA_CHECK(cudaSetDevice(device));
  } else {
    previous_ = -1;  // nothing to restore
  }
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0) TRELLIS_CUDA_CHECK(cudaSetDevice(previous_));
}

}  // namespace trellis
