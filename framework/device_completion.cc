#include "framework/device_completion.h"

#include <memory>

#include "framework/status.h"

#if defined(TRELLIS_WITH_CUDA)
#include <cuda_runtime.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#endif

namespace trellis {

#if defined(TRELLIS_WITH_CUDA)
namespace {

// An event recorded on a device's compute stream, destroyed with its owner.
class RecordedEvent {
 public:
  explicit RecordedEvent(int device) : device_(device) {
    CudaDeviceGuard guard(device_);
    TRELLIS_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    TRELLIS_CUDA_CHECK(cudaEventRecord(event_, ComputeStream()));
  }
  ~RecordedEvent() {
    CudaDeviceGuard guard(device_);
    (void)cudaEventDestroy(event_);
  }
  RecordedEvent(const RecordedEvent&) = delete;
  RecordedEvent& operator=(const RecordedEvent&) = delete;

  bool Done() const {
    CudaDeviceGuard guard(device_);
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it
      return false;
    }
    TRELLIS_CUDA_CHECK(state);
    return true;
  }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace
#endif

CompletionProbe DeviceCompletionProbe(Device device) {
  if (!device.is_cuda()) return nullptr;
#if defined(TRELLIS_WITH_CUDA)
  auto event = std::make_shared<RecordedEvent>(device.index);
  return [event] { return event->Done(); };
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
  return nullptr;
#endif
}

}  // namespace trellis
