#include "framework/kernel_profile.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "framework/status.h"

#if defined(TRELLIS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#endif

namespace trellis {
namespace kernel_profile_internal {
std::atomic<KernelProfiler*> active{nullptr};
}  // namespace kernel_profile_internal

namespace {

// Profiled calls open on this thread (see "Nesting" in the header).
thread_local int depth = 0;

// Pending CUDA intervals kept before the finished ones are read without
// waiting, so a long profiled stretch between reports holds a bounded
// number of events.
constexpr size_t kMaxPending = 8192;

#if defined(TRELLIS_WITH_CUDA)
cudaEvent_t AsEvent(void* event) { return static_cast<cudaEvent_t>(event); }

void RecordOnComputeStream(void* event, int device) {
  CudaDeviceGuard guard(device);
  TRELLIS_CUDA_CHECK(cudaEventRecord(AsEvent(event), ComputeStream()));
}
#endif

}  // namespace

KernelProfiler::KernelProfiler() {
  KernelProfiler* expected = nullptr;
  TRELLIS_CHECK(kernel_profile_internal::active.compare_exchange_strong(
      expected, this, std::memory_order_acq_rel))
      << "a KernelProfiler is already active";
}

KernelProfiler::~KernelProfiler() {
  kernel_profile_internal::active.store(nullptr, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  Drain(/*wait=*/true, /*keep=*/false);
#if defined(TRELLIS_WITH_CUDA)
  for (const auto& [device, event] : all_events_) {
    CudaDeviceGuard guard(device);
    TRELLIS_CUDA_CHECK(cudaEventDestroy(AsEvent(event)));
  }
#endif
}

std::vector<KernelTime> KernelProfiler::Report() {
  std::lock_guard<std::mutex> lock(mu_);
  Drain(/*wait=*/true, /*keep=*/true);
  std::vector<KernelTime> times;
  times.reserve(totals_.size());
  for (const auto& [name, totals] : totals_) {
    times.push_back(KernelTime{name, totals.calls, totals.ms});
  }
  std::stable_sort(
      times.begin(), times.end(),
      [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return times;
}

void KernelProfiler::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  Drain(/*wait=*/true, /*keep=*/false);
  totals_.clear();
}

void KernelProfiler::Add(const std::string& name, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Totals& totals = totals_[name];
  ++totals.calls;
  totals.ms += ms;
}

void* KernelProfiler::TakeEvent(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<void*>& pool = free_events_[device];
  if (!pool.empty()) {
    void* event = pool.back();
    pool.pop_back();
    return event;
  }
#if defined(TRELLIS_WITH_CUDA)
  CudaDeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  TRELLIS_CUDA_CHECK(cudaEventCreate(&event));
  all_events_.emplace_back(device, event);
  return event;
#else
  TRELLIS_CHECK(false) << "CUDA event asked for in a build without CUDA";
  return nullptr;
#endif
}

void KernelProfiler::AddDevice(const char* name, int device, void* start,
                               void* end) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(Pending{name, device, start, end});
  if (pending_.size() >= kMaxPending) Drain(/*wait=*/false, /*keep=*/true);
}

void KernelProfiler::Drain(bool wait, bool keep) {
#if defined(TRELLIS_WITH_CUDA)
  while (!pending_.empty()) {
    const Pending& p = pending_.front();
    CudaDeviceGuard guard(p.device);
    if (wait) {
      WaitForCudaEvent(AsEvent(p.end));
    } else {
      const cudaError_t state = cudaEventQuery(AsEvent(p.end));
      if (state == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: keep it from later checks
        break;
      }
      TRELLIS_CUDA_CHECK(state);
    }
    if (keep) {
      float ms = 0;
      TRELLIS_CUDA_CHECK(
          cudaEventElapsedTime(&ms, AsEvent(p.start), AsEvent(p.end)));
      Totals& totals = totals_[p.name];
      ++totals.calls;
      totals.ms += ms;
    }
    std::vector<void*>& pool = free_events_[p.device];
    pool.push_back(p.start);
    pool.push_back(p.end);
    pending_.pop_front();
  }
#else
  // Without CUDA nothing is ever pending.
  (void)wait;
  (void)keep;
#endif
}

void KernelScope::Begin(const char* name,
                        std::initializer_list<const Tensor*> tensors) {
  profiler_ = KernelProfiler::Active();
  outermost_ = depth++ == 0;
  if (!outermost_) return;
  name_ = name;
  for (const Tensor* t : tensors) {
    if (t->defined() && t->device().is_cuda()) {
      device_ = t->device().index;
      break;
    }
  }
#if defined(TRELLIS_WITH_CUDA)
  if (device_ >= 0) {
    start_event_ = profiler_->TakeEvent(device_);
    RecordOnComputeStream(start_event_, device_);
    return;
  }
#endif
  start_ = std::chrono::steady_clock::now();
}

void KernelScope::End() {
  --depth;
  if (!outermost_) return;
#if defined(TRELLIS_WITH_CUDA)
  if (device_ >= 0) {
    void* end_event = profiler_->TakeEvent(device_);
    RecordOnComputeStream(end_event, device_);
    profiler_->AddDevice(name_, device_, start_event_, end_event);
    return;
  }
#endif
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start_;
  profiler_->Add(name_, elapsed.count());
}

std::string FormatKernelTimes(const std::vector<KernelTime>& times) {
  double total_ms = 0;
  int64_t total_calls = 0;
  size_t width = 6;  // "kernel", "total"
  for (const KernelTime& t : times) {
    total_ms += t.ms;
    total_calls += t.calls;
    width = std::max(width, t.name.size());
  }
  const int w = static_cast<int>(width);
  std::string out = absl::StrFormat("%-*s %8s %12s %7s\n", w, "kernel", "calls",
                                    "total ms", "share");
  for (const KernelTime& t : times) {
    const double share = total_ms > 0 ? 100.0 * t.ms / total_ms : 0.0;
    absl::StrAppendFormat(&out, "%-*s %8d %12.3f %6.1f%%\n", w, t.name, t.calls,
                          t.ms, share);
  }
  absl::StrAppendFormat(&out, "%-*s %8d %12.3f %6.1f%%\n", w, "total",
                        total_calls, total_ms, total_ms > 0 ? 100.0 : 0.0);
  return out;
}

}  // namespace trellis
