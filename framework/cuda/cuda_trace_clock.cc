#include "framework/cuda/cuda_trace_clock.h"

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/status.h"

namespace trellis {

CudaTraceClock::CudaTraceClock(int device) : device_(device) {
  CudaDeviceGuard guard(device_);
  TRELLIS_CUDA_CHECK(cudaEventCreate(&reference_));
  BeginStep(/*align_with_host=*/true);
}

CudaTraceClock::~CudaTraceClock() {
  CudaDeviceGuard guard(device_);
  for (cudaEvent_t e : events_) TRELLIS_CUDA_CHECK(cudaEventDestroy(e));
  TRELLIS_CUDA_CHECK(cudaEventDestroy(reference_));
}

void CudaTraceClock::BeginStep(bool align_with_host) {
  CudaDeviceGuard guard(device_);
  next_ = 0;
  aligned_ = align_with_host;
  if (!align_with_host) {
    TRELLIS_CUDA_CHECK(cudaEventRecord(reference_, ComputeStream()));
    return;
  }
  // With the stream idle the reference happens as soon as it is recorded,
  // so the host time taken right after it has happened is its time.
  WaitForCudaStream(ComputeStream());
  TRELLIS_CUDA_CHECK(cudaEventRecord(reference_, ComputeStream()));
  WaitForCudaEvent(reference_);
  reference_host_ = std::chrono::steady_clock::now();
}

int64_t CudaTraceClock::Mark() {
  CudaDeviceGuard guard(device_);
  if (next_ == events_.size()) {
    cudaEvent_t e = nullptr;
    TRELLIS_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  TRELLIS_CUDA_CHECK(cudaEventRecord(events_[next_], ComputeStream()));
  return static_cast<int64_t>(next_++);
}

cudaEvent_t CudaTraceClock::Event(int64_t mark) const {
  TRELLIS_CHECK(mark >= 0 && static_cast<size_t>(mark) < next_)
      << "trace mark " << mark << " is not of this step (" << next_
      << " marks)";
  return events_[static_cast<size_t>(mark)];
}

float CudaTraceClock::ElapsedMs(cudaEvent_t a, cudaEvent_t b) const {
  CudaDeviceGuard guard(device_);
  // Marks resolved after a host read of the step's results have happened
  // already: no wait then.
  if (!CudaEventDone(b)) WaitForCudaEvent(b);
  float ms = 0;
  TRELLIS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

double CudaTraceClock::Resolve(int64_t mark,
                               std::chrono::steady_clock::time_point origin) {
  TRELLIS_CHECK(aligned_) << "CudaTraceClock::Resolve in a step begun "
                             "without aligning with the host";
  const double reference_us =
      std::chrono::duration<double, std::micro>(reference_host_ - origin)
          .count();
  return reference_us + 1e3 * ElapsedMs(reference_, Event(mark));
}

double CudaTraceClock::Seconds(int64_t begin, int64_t end) {
  return 1e-3 * ElapsedMs(Event(begin), Event(end));
}

}  // namespace trellis
