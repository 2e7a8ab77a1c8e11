// The CUDA trace clock times work when the device runs it, on the host's
// clock: a span around queued work lasts as long as the device took, and
// ends after the host queued it.
#include "framework/cuda/cuda_trace_clock.h"

#include <gtest/gtest.h>

#include <chrono>

#include "framework/cuda/cuda_device.h"
#include "framework/host_sync.h"
#include "framework/kernels/matmul.h"
#include "framework/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

TEST(CudaTraceClockTest, SpansMeasureTheDeviceNotTheHost) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Device gpu = cuda_test::Gpu();
  Tensor a = Tensor::Zeros({2048, 2048}, DType::kF32, gpu);
  Tensor b = Tensor::Zeros({2048, 2048}, DType::kF32, gpu);
  Tensor c = Tensor::Empty({2048, 2048}, DType::kF32, gpu);
  const auto clock = NewDeviceTraceClock(gpu);
  ASSERT_NE(clock, nullptr);
  const Clock::time_point origin = Clock::now();
  clock->BeginStep(/*align_with_host=*/true);
  const int64_t begin = clock->Mark();
  for (int i = 0; i < 20; ++i) {
    MatmulForward(a, b, Tensor(), c, WeightLayout::kInOut);
  }
  const int64_t end = clock->Mark();
  const Clock::time_point queued = Clock::now();
  const double seconds = clock->Seconds(begin, end);
  // 20 GEMMs of 17 GFLOP each take well over a microsecond anywhere.
  EXPECT_GT(seconds, 1e-6);
  const double begin_us = clock->Resolve(begin, origin);
  const double end_us = clock->Resolve(end, origin);
  EXPECT_GE(begin_us, 0.0);
  EXPECT_NEAR(end_us - begin_us, 1e6 * seconds, 1.0);
  // The work ended on the device no earlier than the host queued its start.
  const double queued_us =
      std::chrono::duration<double, std::micro>(queued - origin).count();
  EXPECT_GE(end_us, queued_us - 1e6 * seconds);
  // A new step reuses the events: the old marks are gone.
  clock->BeginStep(/*align_with_host=*/true);
  EXPECT_EQ(clock->Mark(), 0);
}

TEST(CudaTraceClockTest, AnUntracedStepWaitsOnlyForWhatTheHostReads) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Device gpu = cuda_test::Gpu();
  Tensor a = Tensor::Zeros({512, 512}, DType::kF32, gpu);
  Tensor c = Tensor::Empty({512, 512}, DType::kF32, gpu);
  const auto clock = NewDeviceTraceClock(gpu);
  ASSERT_NE(clock, nullptr);
  ResetHostWaits();
  clock->BeginStep(/*align_with_host=*/false);
  const int64_t begin = clock->Mark();
  for (int i = 0; i < 4; ++i) {
    MatmulForward(a, a, Tensor(), c, WeightLayout::kInOut);
  }
  const int64_t end = clock->Mark();
  EXPECT_EQ(HostWaits(), 0);
  ReadToHost(c.Narrow(0, 1));  // the step's one read waits for everything
  EXPECT_EQ(HostWaits(), 1);
  EXPECT_GT(clock->Seconds(begin, end), 0.0);
  EXPECT_EQ(HostWaits(), 1);  // the marks had happened
}

}  // namespace
}  // namespace trellis
