// StagedUpload: copies a batch of host tensors to one device without the
// host waiting for the device.
//
// On CUDA each Upload copies its sources into one page-locked (pinned) host
// buffer and queues a cudaMemcpyAsync per tensor on the device's compute
// stream, so kernels queued after it see the data and the host moves on at
// once (a copy from pageable memory would block the host until the device
// had drained). The buffer is reused: before overwriting it, Upload makes
// sure the previous batch's copies have left it (an event; normally done,
// since a step's host reads waited for them, else one counted host wait,
// framework/host_sync.h). On the CPU Upload copies directly.
//
// Thread safety: none; one thread uses an uploader.
#ifndef TRELLIS_FRAMEWORK_STAGED_UPLOAD_H_
#define TRELLIS_FRAMEWORK_STAGED_UPLOAD_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

class StagedUpload {
 public:
  explicit StagedUpload(Device device);
  ~StagedUpload();
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  Device device() const { return device_; }
  // Copies each pair's source (a CPU tensor) into its destination (on
  // device(); the same dtype and element count). REQUIRES: the
  // destinations stay alive until the copies have run (queued work).
  void Upload(const std::vector<std::pair<const Tensor*, Tensor*>>& copies);
  // Bytes of pinned host memory held (0 on the CPU).
  size_t staging_bytes() const { return capacity_; }

 private:
  // Waits (counted) unless the previous batch's copies have run.
  void WaitForPreviousCopies();

  Device device_;
  void* staging_ = nullptr;  // pinned host memory (CUDA only)
  size_t capacity_ = 0;
  void* copied_ = nullptr;  // cudaEvent_t recorded after the last batch
  bool pending_ = false;
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_STAGED_UPLOAD_H_
