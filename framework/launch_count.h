// Counts device launches: the kernels, cuBLAS GEMMs, memsets and copies a
// piece of work puts on a device, so that tests can pin how many passes a
// layer's forward or backward makes.
//
//   LaunchCounter counter;  // active until destroyed
//   block.BackwardInput(...);
//   EXPECT_LE(counter.count(), 15);
//
// What counts, on CUDA: every kernel launch (TRELLIS_CUDA_CHECK_LAUNCH,
// which follows each one), every cuBLASLt or cuBLAS GEMM, every cuDNN plan
// executed (one each, whatever kernels cuDNN runs for it), and every device
// memset and copy (DeviceMemset / DeviceCopy: Tensor::Zero,
// Tensor::CopyFrom; and the kernels' own memsets). On the CPU, a public kernel
// (framework/kernels/*.h) counts the launches its CUDA twin makes for bfloat16
// tensors (ModeledLaunches below), Tensor::Zero and CopyFrom count one each,
// and calls nested inside another CPU kernel count nothing, so that a CPU run
// predicts the count of the same work on a GPU.
//
// Cost when no counter is active: one atomic load per launch.
//
// Thread safety: at most one counter is active in the process at a time;
// launches on any thread add to it (atomically). Construct and destroy it
// while no counted work is in flight.
//
// This header is light (no Abseil, no CUDA) so that .cu files include it.
#ifndef TRELLIS_FRAMEWORK_LAUNCH_COUNT_H_
#define TRELLIS_FRAMEWORK_LAUNCH_COUNT_H_

#include <atomic>
#include <cstdint>

namespace trellis {

class LaunchCounter;

namespace launch_count_internal {
// The active counter, or null.
extern std::atomic<LaunchCounter*> active;
}  // namespace launch_count_internal

class LaunchCounter {
 public:
  // Becomes the process's active counter. REQUIRES: none is active.
  LaunchCounter();
  ~LaunchCounter();
  LaunchCounter(const LaunchCounter&) = delete;
  LaunchCounter& operator=(const LaunchCounter&) = delete;

  // Launches since construction or the last Reset.
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  void Reset() { count_.store(0, std::memory_order_relaxed); }

 private:
  friend void CountLaunches(int64_t n);
  std::atomic<int64_t> count_{0};
};

// Adds n launches to the active counter, if any.
inline void CountLaunches(int64_t n) {
  LaunchCounter* counter =
      launch_count_internal::active.load(std::memory_order_acquire);
  if (__builtin_expect(counter != nullptr, 0)) {
    counter->count_.fetch_add(n, std::memory_order_relaxed);
  }
}

// Whether this thread is inside a CPU kernel's CpuLaunchScope.
bool InsideCpuKernel();

// Opened by TRELLIS_CUDA_DISPATCH on a public kernel's CPU path: when it is
// the outermost on its thread, it counts ModeledLaunches(name) (or what
// set_launches chose) as it closes.
class CpuLaunchScope {
 public:
  explicit CpuLaunchScope(const char* name);
  ~CpuLaunchScope();
  CpuLaunchScope(const CpuLaunchScope&) = delete;
  CpuLaunchScope& operator=(const CpuLaunchScope&) = delete;

  // Overrides the modeled count, for kernels whose CUDA twin launches a
  // number that depends on the arguments.
  void set_launches(int n) { launches_ = n; }

 private:
  bool outermost_;
  int launches_;
};

// The launches the CUDA twin of the public kernel `name` makes for
// bfloat16 tensors (1 unless listed in launch_count.cc).
int ModeledLaunches(const char* name);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_LAUNCH_COUNT_H_
