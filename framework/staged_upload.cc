#include "framework/staged_upload.h"

#include <cstring>

#include "framework/status.h"

#ifdef TRELLIS_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_memory.h"
#endif

namespace trellis {
namespace {

// Each tensor's bytes start on this boundary in the staging buffer.
constexpr size_t kAlign = 256;

size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void CheckPair(const Tensor& src, const Tensor& dst, Device device) {
  TRELLIS_CHECK(src.device().is_cpu())
      << "StagedUpload: a source on " << DeviceName(src.device());
  TRELLIS_CHECK(dst.device() == device)
      << "StagedUpload: a destination on " << DeviceName(dst.device())
      << ", not " << DeviceName(device);
  TRELLIS_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "StagedUpload: " << DTypeName(src.dtype()) << " (" << src.numel()
      << ") into " << DTypeName(dst.dtype()) << " (" << dst.numel() << ")";
}

}  // namespace

StagedUpload::StagedUpload(Device device) : device_(device) {}

StagedUpload::~StagedUpload() {
#ifdef TRELLIS_WITH_CUDA
  if (device_.is_cuda()) {
    CudaDeviceGuard guard(device_.index);
    if (copied_ != nullptr) {
      auto event = static_cast<cudaEvent_t>(copied_);
      // The queued copies read the buffer: let them finish first.
      if (pending_) WaitForCudaEvent(event);
      TRELLIS_CUDA_CHECK(cudaEventDestroy(event));
    }
    CudaHostFree(staging_);
  }
#endif
}

void StagedUpload::WaitForPreviousCopies() {
#ifdef TRELLIS_WITH_CUDA
  if (!pending_) return;
  auto event = static_cast<cudaEvent_t>(copied_);
  if (!CudaEventDone(event)) WaitForCudaEvent(event);
  pending_ = false;
#endif
}

void StagedUpload::Upload(
    const std::vector<std::pair<const Tensor*, Tensor*>>& copies) {
  [[maybe_unused]] size_t total = 0;
  for (const auto& [src, dst] : copies) {
    CheckPair(*src, *dst, device_);
    total += Aligned(src->nbytes());
  }
  if (device_.is_cpu()) {
    for (const auto& [src, dst] : copies) {
      if (src->nbytes() > 0) std::memcpy(dst->raw(), src->raw(), src->nbytes());
    }
    return;
  }
#ifdef TRELLIS_WITH_CUDA
  CudaDeviceGuard guard(device_.index);
  WaitForPreviousCopies();
  if (total > capacity_) {
    CudaHostFree(staging_);
    staging_ = CudaHostAllocate(total);
    capacity_ = total;
  }
  if (copied_ == nullptr) {
    cudaEvent_t event = nullptr;
    TRELLIS_CUDA_CHECK(
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    copied_ = event;
  }
  char* staging = static_cast<char*>(staging_);
  size_t offset = 0;
  for (const auto& [src, dst] : copies) {
    const size_t bytes = src->nbytes();
    if (bytes > 0) std::memcpy(staging + offset, src->raw(), bytes);
    CudaCopyToDeviceAsync(dst->raw(), staging + offset, bytes, device_.index);
    offset += Aligned(bytes);
  }
  TRELLIS_CUDA_CHECK(
      cudaEventRecord(static_cast<cudaEvent_t>(copied_), ComputeStream()));
  pending_ = true;
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
#endif
}

}  // namespace trellis
