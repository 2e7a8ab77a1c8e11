// DeviceWaitMonitor: deadlines on device (GPU) work that the host does not
// wait for itself.
//
// A communication on device buffers is only enqueued: its wait orders GPU
// streams, and the host blocks later, somewhere else (a loss read, a stream
// synchronization), with no deadline. Each such operation is handed here
// with a CompletionProbe (framework/device_completion.h) taken after it was
// enqueued. One background thread polls the pending probes every `poll_s`:
// a finished one is reported to `done` (the watchdog marks it done in its
// flight recorder). A second thread, which makes no device call, reports
// one still pending `timeout_s` after it was handed over to `timeout`,
// once, and the monitor watches nothing more (the watchdog's handler
// reports and ends the process): a probe stuck in a device call behind the
// hung work it asks about cannot silence the deadline.
//
// `done` runs on the probing thread and `timeout` on the deadline thread;
// neither may use MPI (the programs run MPI_THREAD_FUNNELED).
//
// Thread safety: Watch and pending may be called from any thread; the
// destructor stops and joins both threads (probes not yet done are
// dropped).
#ifndef TRELLIS_PARALLEL_DEVICE_WAIT_MONITOR_H_
#define TRELLIS_PARALLEL_DEVICE_WAIT_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/device_completion.h"

namespace trellis {

class DeviceWaitMonitor {
 public:
  using Done = std::function<void(int64_t id)>;
  using Timeout = std::function<void(int64_t id, double waited_s)>;

  // REQUIRES: timeout_s > 0, poll_s > 0.
  DeviceWaitMonitor(double timeout_s, Done done, Timeout timeout,
                    double poll_s = 0.005);
  ~DeviceWaitMonitor();
  DeviceWaitMonitor(const DeviceWaitMonitor&) = delete;
  DeviceWaitMonitor& operator=(const DeviceWaitMonitor&) = delete;

  // Watches operation `id` from now on. REQUIRES: `probe` is not null.
  void Watch(int64_t id, CompletionProbe probe);
  // Operations handed over and not yet reported done.
  int pending() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    int64_t id;
    CompletionProbe probe;
    Clock::time_point since;
  };
  void ProbeLoop();
  void DeadlineLoop();

  const double timeout_s_;
  const double poll_s_;
  Done done_;
  Timeout timeout_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> entries_;
  bool stop_ = false;
  bool fired_ = false;
  // Last: they start once the rest is set up.
  std::thread prober_;
  std::thread deadline_;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_DEVICE_WAIT_MONITOR_H_
