#include "framework/cuda/cuda_trace_clock.h"

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/status.h"

namespace trellis {

CudaTraceClock::CudaTraceClock(int device) : device_(device) {
  CudaDeviceGuard guard(device_);
  TRELLIS_CUDA_CHECK(cudaEventCreate(&reference_));
  BeginStep();
}

CudaTraceClock::~CudaTraceClock() {
  CudaDeviceGuard guard(device_);
  for (cudaEvent_t e : events_) TRELLIS_CUDA_CHECK(cudaEventDestroy(e));
  TRELLIS_CUDA_CHECK(cudaEventDestroy(reference_));
}

void CudaTraceClock::BeginStep() {
  CudaDeviceGuard guard(device_);
  // With the stream idle the reference happens as soon as it is recorded,
  // so the host time taken right after it has happened is its time.
  TRELLIS_CUDA_CHECK(cudaStreamSynchronize(ComputeStream()));
  TRELLIS_CUDA_CHECK(cudaEventRecord(reference_, ComputeStream()));
  TRELLIS_CUDA_CHECK(cudaEventSynchronize(reference_));
  reference_host_ = std::chrono::steady_clock::now();
  next_ = 0;
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
  TRELLIS_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  TRELLIS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

double CudaTraceClock::Resolve(int64_t mark,
                               std::chrono::steady_clock::time_point origin) {
  const double reference_us =
      std::chrono::duration<double, std::micro>(reference_host_ - origin)
          .count();
  return reference_us + 1e3 * ElapsedMs(reference_, Event(mark));
}

double CudaTraceClock::Seconds(int64_t begin, int64_t end) {
  return 1e-3 * ElapsedMs(Event(begin), Event(end));
}

}  // namespace trellis
