// CudaTraceClock: trace marks that are CUDA events on a device's compute
// stream, so a span measures when the device ran the work between two marks,
// not when the host queued it.
//
// Mark() records an event (reused from a pool) and returns its index;
// Resolve() and Seconds() wait for the events they read unless those have
// already happened (a counted host wait, framework/host_sync.h). BeginStep()
// recycles the pool and records a reference event; with align_with_host
// (traced steps) it first waits for the device to go idle, so the reference
// happens at a known host time: device times are reported as that host time
// plus the device's elapsed time since the reference, which keeps them on
// the host's steady clock to within the reference's latency
// (microseconds). Untraced steps skip that wait: their bubble needs only
// Seconds().
//
// Thread safety: none; the training thread marks and resolves.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_TRACE_CLOCK_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_TRACE_CLOCK_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "framework/trace.h"

namespace trellis {

class CudaTraceClock : public TraceClock {
 public:
  explicit CudaTraceClock(int device);
  ~CudaTraceClock() override;
  CudaTraceClock(const CudaTraceClock&) = delete;
  CudaTraceClock& operator=(const CudaTraceClock&) = delete;

  int64_t Mark() override;
  double Resolve(int64_t mark,
                 std::chrono::steady_clock::time_point origin) override;
  double Seconds(int64_t begin, int64_t end) override;
  void BeginStep(bool align_with_host) override;

 private:
  cudaEvent_t Event(int64_t mark) const;
  // Milliseconds from event `a` to event `b`, once `b` has happened.
  float ElapsedMs(cudaEvent_t a, cudaEvent_t b) const;

  int device_;
  cudaEvent_t reference_ = nullptr;
  std::chrono::steady_clock::time_point reference_host_;
  std::vector<cudaEvent_t> events_;
  size_t next_ = 0;       // events_[0, next_) are this step's marks
  bool aligned_ = false;  // this step began with align_with_host
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_TRACE_CLOCK_H_
