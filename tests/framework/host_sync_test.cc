// Host waits are counted at the framework's entry points on the CPU too, so
// that CPU tests can hold code to a budget of waits a GPU would pay; the
// device-side running total and the staged upload never wait.
#include "framework/host_sync.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "framework/kernels/accumulate.h"
#include "framework/kernels/elementwise.h"
#include "framework/staged_upload.h"
#include "framework/tensor.h"

namespace trellis {
namespace {

Tensor Ramp(int64_t n, DType dtype) {
  Tensor t = Tensor::Empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    const double v = 0.001 * static_cast<double>((i * 37) % 101) - 0.03;
    if (dtype == DType::kF32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else {
      t.data<double>()[i] = v;
    }
  }
  return t;
}

TEST(HostSyncTest, ReadsAndReductionsToTheHostCountOnceEach) {
  const Tensor a = Ramp(100, DType::kF32), b = Ramp(33, DType::kF32);
  ResetHostWaits();
  EXPECT_EQ(HostWaits(), 0);
  const Tensor copy = ReadToHost(a);
  EXPECT_EQ(HostWaits(), 1);
  EXPECT_EQ(copy.data<float>()[5], a.data<float>()[5]);
  EXPECT_NE(copy.raw(), a.raw());
  Sum(a);
  EXPECT_EQ(HostWaits(), 2);
  SumOfSquares(a);
  EXPECT_EQ(HostWaits(), 3);
  // Many tensors, one wait (the gradient norm).
  SumOfSquares(std::vector<const Tensor*>{&a, &b, &a});
  EXPECT_EQ(HostWaits(), 4);
  WaitForDevice(Device::Cpu());
  EXPECT_EQ(HostWaits(), 5);
  ResetHostWaits();
  EXPECT_EQ(HostWaits(), 0);
}

TEST(HostSyncTest, TheCountIsPerThread) {
  ResetHostWaits();
  Sum(Ramp(8, DType::kF32));
  int64_t other = -1;
  std::thread thread([&] {
    Sum(Ramp(8, DType::kF32));
    Sum(Ramp(8, DType::kF32));
    other = HostWaits();
  });
  thread.join();
  EXPECT_EQ(other, 2);
  EXPECT_EQ(HostWaits(), 1);
}

TEST(HostSyncTest, AccumulateSumAddsExactlySumOverDivisorWithoutWaiting) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor x = Ramp(1001, dtype), y = Ramp(77, dtype);
    Tensor total = Tensor::Zeros({1}, DType::kF64);
    ResetHostWaits();
    AccumulateSum(x, 1001.0, total);
    AccumulateSum(y, 77.0, total);
    EXPECT_EQ(HostWaits(), 0);
    // Bit for bit what the host would add from Sum.
    double want = 0.0;
    want += Sum(x) / 1001.0;
    want += Sum(y) / 77.0;
    EXPECT_EQ(total.data<double>()[0], want) << DTypeName(dtype);
  }
}

TEST(HostSyncTest, StagedUploadOnTheCpuCopiesWithoutWaiting) {
  StagedUpload upload(Device::Cpu());
  Tensor a = Tensor::Empty({2, 3}, DType::kI32);
  for (int64_t i = 0; i < 6; ++i) a.data<int32_t>()[i] = static_cast<int>(i);
  Tensor b = Tensor::Zeros({6}, DType::kI32);
  ResetHostWaits();
  upload.Upload({{&a, &b}});
  EXPECT_EQ(HostWaits(), 0);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(b.data<int32_t>()[i], i);
  EXPECT_EQ(upload.staging_bytes(), 0u);
}

}  // namespace
}  // namespace trellis
