// Per-kernel time breakdown. While a KernelProfiler is alive, every public
// kernel call (framework/kernels/*.h; TRELLIS_CUDA_DISPATCH opens each one
// with a KernelScope named after the function) adds its time to its name:
//
//   KernelProfiler profiler;  // active until destroyed
//   ... run a training step ...
//   std::printf("%s", FormatKernelTimes(profiler.Report()).c_str());
//
// Clocks. A call whose tensors are all on the CPU is timed with
// std::chrono::steady_clock around the call. A call with a tensor on a CUDA
// device gets a pair of CUDA events recorded on that device's
// ComputeStream() before and after it (events come from a pool); the pairs
// stay pending until Report() or Reset(), which wait for the device once and
// read the elapsed times. So profiling never synchronizes per kernel. A CUDA
// time is the stream time between the two events: the kernel's execution
// plus any time the stream sat idle because the host had not issued the work
// yet (a launch-bound step shows up in its kernels' times, as it should).
//
// Nesting. Only the outermost profiled call on a thread counts: kernels that
// a public kernel calls internally (MatmulForwardGelu's CPU path calls
// MatmulForward and GeluForward) are part of its time, so the totals are
// never double counted and add up to at most the profiled wall time.
//
// Cost when no profiler is active: one atomic load and branch when a kernel
// starts and one branch when it ends.
//
// Thread safety: at most one profiler is active in the process at a time.
// Kernels may run on any thread while it is active; its records are locked.
// Construct and destroy it while no profiled call is in flight.
#ifndef TRELLIS_FRAMEWORK_KERNEL_PROFILE_H_
#define TRELLIS_FRAMEWORK_KERNEL_PROFILE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

// One name's totals.
struct KernelTime {
  std::string name;
  int64_t calls = 0;
  double ms = 0;
};

class KernelProfiler;

namespace kernel_profile_internal {
// The active profiler, or null.
extern std::atomic<KernelProfiler*> active;
}  // namespace kernel_profile_internal

class KernelProfiler {
 public:
  // Becomes the process's active profiler. REQUIRES: none is active.
  KernelProfiler();
  // Stops profiling; waits for pending device intervals, frees the events.
  ~KernelProfiler();
  KernelProfiler(const KernelProfiler&) = delete;
  KernelProfiler& operator=(const KernelProfiler&) = delete;

  // The active profiler, or null.
  static KernelProfiler* Active() {
    return kernel_profile_internal::active.load(std::memory_order_acquire);
  }

  // Waits for the pending device intervals, then returns the totals since
  // construction or the last Reset, largest total first (ties by name).
  std::vector<KernelTime> Report();
  // Forgets all totals, including those of pending device intervals.
  void Reset();
  // Adds an interval timed by the caller, e.g. a host-side collective.
  void Add(const std::string& name, double ms);

 private:
  friend class KernelScope;
  // A CUDA interval not yet read: its name, device and event pair.
  struct Pending {
    std::string name;
    int device;
    void* start;
    void* end;
  };
  struct Totals {
    int64_t calls = 0;
    double ms = 0;
  };

  // An event of `device` from the pool (created when the pool is empty).
  void* TakeEvent(int device);
  void AddDevice(const char* name, int device, void* start, void* end);
  // Reads the pending intervals into the totals (or drops them when
  // `keep` is false) and returns their events to the pool. With `wait`
  // false, stops at the first interval whose end the device has not reached.
  void Drain(bool wait, bool keep);

  std::mutex mu_;
  std::map<std::string, Totals> totals_;
  std::deque<Pending> pending_;
  std::map<int, std::vector<void*>> free_events_;  // by device
  std::vector<std::pair<int, void*>> all_events_;  // to destroy
};

// Times one call while a profiler is active (see above). Kernels get one
// from TRELLIS_CUDA_DISPATCH; other code may open one around work that
// should count under its own name (e.g. "comm:tp"). `name` must outlive the
// scope; `tensors` (pointers, may be undefined) decide the clock: the first
// on a CUDA device picks CUDA events on that device.
class KernelScope {
 public:
  KernelScope(const char* name, std::initializer_list<const Tensor*> tensors) {
    if (__builtin_expect(KernelProfiler::Active() != nullptr, 0)) {
      Begin(name, tensors);
    }
  }
  ~KernelScope() {
    if (__builtin_expect(profiler_ != nullptr, 0)) End();
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  void Begin(const char* name, std::initializer_list<const Tensor*> tensors);
  void End();

  KernelProfiler* profiler_ = nullptr;  // null: not profiling
  const char* name_ = nullptr;
  bool outermost_ = false;
  int device_ = -1;  // the CUDA device timed; -1: the host clock
  void* start_event_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

// The report as a table: kernel, calls, total ms, share of the total, and a
// last line with the sums.
std::string FormatKernelTimes(const std::vector<KernelTime>& times);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNEL_PROFILE_H_
