#include "framework/launch_count.h"

#include <cstring>

#include "framework/status.h"

namespace trellis {
namespace launch_count_internal {
std::atomic<LaunchCounter*> active{nullptr};
}  // namespace launch_count_internal

namespace {

// CpuLaunchScopes open on this thread.
thread_local int cpu_depth = 0;

// Public kernels whose CUDA twin makes more (or fewer) than one launch for
// bfloat16 tensors. Keep in step with framework/cuda/.
struct Modeled {
  const char* name;
  int launches;
};
constexpr Modeled kModeled[] = {
    // Two-pass deterministic column sums (device_common.cuh).
    {"BiasBackward", 2},
    {"LayerNormBackwardWeight", 2},
    {"RmsNormBackwardWeight", 2},
    // dw zeroed, its two-pass column sums, then the input gradient.
    {"QkNormBackward", 4},
    // Row statistics, two two-pass column sums, the finishing sum.
    {"RouterLosses", 6},
    // The counting sort: chunk counts, offsets, placement.
    {"RouteByExpert", 3},
    // The scaled scatter, then the weights' dot products.
    {"CombineRowsBackward", 2},
    // A partial pass and a finishing pass.
    {"SumOfSquares", 2},
    {"Sum", 2},
    // The bfloat16 tensor-core path: row dot products, then the key/value
    // and the query passes.
    {"AttentionBackward", 3},
};

}  // namespace

LaunchCounter::LaunchCounter() {
  LaunchCounter* expected = nullptr;
  TRELLIS_CHECK(launch_count_internal::active.compare_exchange_strong(
      expected, this, std::memory_order_acq_rel))
      << "a LaunchCounter is already active";
}

LaunchCounter::~LaunchCounter() {
  launch_count_internal::active.store(nullptr, std::memory_order_release);
}

bool InsideCpuKernel() { return cpu_depth > 0; }

CpuLaunchScope::CpuLaunchScope(const char* name)
    : outermost_(cpu_depth++ == 0), launches_(0) {
  if (outermost_) launches_ = ModeledLaunches(name);
}

CpuLaunchScope::~CpuLaunchScope() {
  --cpu_depth;
  if (outermost_) CountLaunches(launches_);
}

int ModeledLaunches(const char* name) {
  for (const Modeled& m : kModeled) {
    if (std::strcmp(m.name, name) == 0) return m.launches;
  }
  return 1;
}

}  // namespace trellis
