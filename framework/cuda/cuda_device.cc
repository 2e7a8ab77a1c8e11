#include "framework/cuda/cuda_device.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "framework/cuda/cuda_check.h"
#include "framework/status.h"

namespace trellis {
namespace {

// A non-negative integer from the environment, or -1.
int EnvRank(const char* name) {
  const char* text = std::getenv(name);
  int value = -1;
  if (text == nullptr || !absl::SimpleAtoi(text, &value) || value < 0) {
    return -1;
  }
  return value;
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clears the sticky "no device" error
    return 0;
  }
  return count;
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
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device is visible to this process; run on a GPU node, check "
        "CUDA_VISIBLE_DEVICES, or use --device=cpu");
  }
  if (local_rank < 0) local_rank = LocalRankFromEnvironment();
  if (local_rank < 0) local_rank = 0;
  const int device = CudaDeviceForLocalRank(local_rank, count);
  TRELLIS_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::string CudaDeviceDescription(int device) {
  cudaDeviceProp prop;
  TRELLIS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return absl::StrFormat(
      "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

void CudaSynchronize(int device) {
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaDeviceGuard::CudaDeviceGuard(int device) {
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
