// CUDA memory through Tensor (allocate, copy both ways, views, fill, zero,
// convert) and the device selection helpers.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/host_sync.h"
#include "framework/kernels/accumulate.h"
#include "framework/kernels/elementwise.h"
#include "framework/staged_upload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::Gpu;

// Sets (or, with null, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(CudaDeviceTest, LocalRanksFillTheDevicesInTurn) {
  EXPECT_EQ(CudaDeviceForLocalRank(0, 4), 0);
  EXPECT_EQ(CudaDeviceForLocalRank(3, 4), 3);
  EXPECT_EQ(CudaDeviceForLocalRank(5, 4), 1);
  EXPECT_EQ(CudaDeviceForLocalRank(7, 1), 0);
}

TEST(CudaDeviceTest, LocalRankComesFromTheLauncher) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv slurm("SLURM_LOCALID", nullptr);
  ScopedEnv hydra("MPI_LOCALRANKID", nullptr);
  EXPECT_EQ(LocalRankFromEnvironment(), -1);
  {
    ScopedEnv set("MPI_LOCALRANKID", "5");
    EXPECT_EQ(LocalRankFromEnvironment(), 5);
    ScopedEnv slurm_set("SLURM_LOCALID", "2");
    EXPECT_EQ(LocalRankFromEnvironment(), 2);
    ScopedEnv ompi_set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    EXPECT_EQ(LocalRankFromEnvironment(), 3);
  }
  ScopedEnv bad("SLURM_LOCALID", "one");
  EXPECT_EQ(LocalRankFromEnvironment(), -1);
}

TEST(CudaDeviceTest, SelectingADeviceFailsClearlyWithoutOne) {
  const absl::StatusOr<int> visible = CudaDeviceCount();
  ASSERT_TRUE(visible.ok()) << visible.status().message();
  const int count = *visible;
  const absl::StatusOr<int> device = SelectCudaDevice(/*local_rank=*/3);
  if (count == 0) {
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(device.status().message()),
                ::testing::HasSubstr("no CUDA device"));
  } else {
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(*device, 3 % count);
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, *device);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_THAT(CudaDeviceDescription(0), ::testing::HasSubstr("sm_"));
  }
}

TEST(CudaDeviceTest, AnExpectedGpuThatCudaCannotSeeFailsNamingTheVersions) {
  ScopedEnv require("TRELLIS_REQUIRE_GPU", "1");
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (count.ok()) {
    // A usable GPU: nothing to report.
    EXPECT_GT(*count, 0);
    return;
  }
  const std::string message(count.status().message());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(message, ::testing::HasSubstr("cudaGetDeviceCount"));
  EXPECT_THAT(message, ::testing::HasSubstr("cudaDriverGetVersion"));
  EXPECT_THAT(message, ::testing::HasSubstr("cudaRuntimeGetVersion"));
  EXPECT_THAT(message, ::testing::HasSubstr(kCudaDriverFloor));
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
  int runtime = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
  EXPECT_THAT(message,
              ::testing::HasSubstr(absl::StrFormat(
                  "runtime %d.%d", runtime / 1000, (runtime % 1000) / 10)));
  // The programs fail with it too, instead of "no device".
  const absl::StatusOr<int> device = SelectCudaDevice(0);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().message(), message);
}

TEST(CudaDeviceTest, NoGpuAndNoneExpectedIsZeroDevices) {
  ScopedEnv require("TRELLIS_REQUIRE_GPU", nullptr);
  if (GpuExpected()) GTEST_SKIP() << "this node has NVIDIA device files";
  const absl::StatusOr<int> count = CudaDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status().message();
  int direct = 0;
  if (cudaGetDeviceCount(&direct) != cudaSuccess) direct = 0;
  cudaGetLastError();
  EXPECT_EQ(*count, direct);
}

// A helper thread that works on device 1 through a guard keeps device 1:
// restoring the runtime's default would put a context on device 0 (a
// rank on another GPU would then hold memory on GPU 0).
TEST(CudaDeviceTest, AGuardOnAFreshThreadLeavesItOnItsDevice) {
  const absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok() || *count < 2) {
    GTEST_SKIP() << "needs two CUDA devices";
  }
  int after = -1;
  std::thread helper([&after] {
    { CudaDeviceGuard guard(1); }
    cudaGetDevice(&after);
  });
  helper.join();
  EXPECT_EQ(after, 1);
}

TEST(CudaMemoryTest, HostSidedCopiesAreCountedHostWaits) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Tensor host = cuda_test::Random({4, 256}, 2);
  ResetHostWaits();
  Tensor device = host.To(Gpu());  // host to device: blocking cudaMemcpy
  EXPECT_EQ(HostWaits(), 1);
  Tensor copy = device.Clone();  // device to device: queued only
  EXPECT_EQ(HostWaits(), 1);
  const Tensor back = ReadToHost(copy);
  EXPECT_EQ(HostWaits(), 2);
  EXPECT_EQ(back.data<float>()[17], host.data<float>()[17]);
  Sum(copy);  // a reduction to a host value reads once
  EXPECT_EQ(HostWaits(), 3);
  SumOfSquares(std::vector<const Tensor*>{&copy, &device});
  EXPECT_EQ(HostWaits(), 4);
  WaitForDevice(Gpu());
  EXPECT_EQ(HostWaits(), 5);
}

TEST(CudaMemoryTest, StagedUploadQueuesCopiesWithoutWaiting) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  StagedUpload upload(Gpu());
  for (int round = 0; round < 3; ++round) {
    Tensor a = Tensor::Empty({3, 50}, DType::kI32);
    Tensor b = Tensor::Empty({7}, DType::kI32);
    for (int64_t i = 0; i < a.numel(); ++i) a.data<int32_t>()[i] = i + round;
    for (int64_t i = 0; i < b.numel(); ++i) b.data<int32_t>()[i] = -i - round;
    Tensor da = Tensor::Empty({3, 50}, DType::kI32, Gpu());
    Tensor db = Tensor::Empty({7}, DType::kI32, Gpu());
    ResetHostWaits();
    upload.Upload({{&a, &da}, {&b, &db}});
    EXPECT_EQ(HostWaits(), 0) << "round " << round;
    // The sources may change at once: the staging copy holds the data.
    a.Fill(0);
    const Tensor back_a = ReadToHost(da), back_b = ReadToHost(db);
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(back_a.data<int32_t>()[i], i + round) << i;
    }
    for (int64_t i = 0; i < b.numel(); ++i) {
      ASSERT_EQ(back_b.data<int32_t>()[i], -i - round) << i;
    }
  }
  EXPECT_GE(upload.staging_bytes(), 3u * 50u * 4u + 7u * 4u);
}

TEST(CudaMemoryTest, AccumulateSumAddsOnTheDeviceLikeTheCpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Tensor x = cuda_test::Random({1000}, 3);
  Tensor cpu_total = Tensor::Zeros({1}, DType::kF64);
  Tensor gpu_total = Tensor::Zeros({1}, DType::kF64, Gpu());
  const Tensor dx = x.To(Gpu());
  ResetHostWaits();
  for (int i = 0; i < 3; ++i) {
    AccumulateSum(x, 1000.0, cpu_total);
    AccumulateSum(dx, 1000.0, gpu_total);
  }
  EXPECT_EQ(HostWaits(), 0);
  const double want = 3.0 * Sum(x) / 1000.0;
  EXPECT_NEAR(cpu_total.data<double>()[0], want, 1e-15);
  EXPECT_NEAR(ReadToHost(gpu_total).data<double>()[0], want, 1e-12);
}

TEST(CudaMemoryTest, RoundTripsThroughTheDevice) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const Tensor host = cuda_test::Random({3, 1000}, 1);
  const Tensor device = host.To(Gpu());
  EXPECT_EQ(device.device(), Gpu());
  EXPECT_EQ(device.shape(), host.shape());
  const Tensor device2 = device.Clone();  // device to device
  const Tensor back = device2.To(Device::Cpu());
  for (int64_t i = 0; i < host.numel(); ++i) {
    ASSERT_EQ(back.data<float>()[i], host.data<float>()[i]) << i;
  }
}

TEST(CudaMemoryTest, ViewsCopyTheirOwnRows) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  Tensor device = Tensor::Zeros({4, 5}, DType::kF32, Gpu());
  Tensor rows = Tensor::Empty({2, 5}, DType::kF32);
  for (int64_t i = 0; i < 10; ++i) rows.data<float>()[i] = 1.0f + i;
  device.Narrow(1, 2).CopyFrom(rows);
  const Tensor back = device.To(Device::Cpu());
  for (int64_t i = 0; i < 20; ++i) {
    const float expected = i >= 5 && i < 15 ? 1.0f + (i - 5) : 0.0f;
    EXPECT_EQ(back.data<float>()[i], expected) << i;
  }
  // And back out of a device view.
  Tensor out = Tensor::Empty({1, 5}, DType::kF32);
  out.CopyFrom(device.Narrow(2, 1));
  EXPECT_EQ(out.data<float>()[0], 6.0f);
}

TEST(CudaMemoryTest, FillSetsEveryDType) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  const int64_t n = 1001;
  auto filled = [&](DType dtype, double value) {
    Tensor t = Tensor::Empty({n}, dtype, Gpu());
    t.Fill(value);
    return t.To(Device::Cpu());
  };
  const Tensor f32 = filled(DType::kF32, 1.5);
  const Tensor f64 = filled(DType::kF64, -2.25);
  const Tensor i32 = filled(DType::kI32, -7);
  const Tensor i64 = filled(DType::kI64, 1ll << 40);
  const Tensor u16 = filled(DType::kU16, 65535);
  const Tensor u32 = filled(DType::kU32, 4000000000.0);
  const Tensor bf16 = filled(DType::kBF16, 3.0);
  const Tensor f16 = filled(DType::kF16, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f32.data<float>()[i], 1.5f);
    ASSERT_EQ(f64.data<double>()[i], -2.25);
    ASSERT_EQ(i32.data<int32_t>()[i], -7);
    ASSERT_EQ(i64.data<int64_t>()[i], int64_t{1} << 40);
    ASSERT_EQ(u16.data<uint16_t>()[i], 65535);
    ASSERT_EQ(u32.data<uint32_t>()[i], 4000000000u);
    // 3.0 is 0x4040 in bfloat16, 1.0 is 0x3c00 in float16.
    ASSERT_EQ(static_cast<const uint16_t*>(bf16.raw())[i], 0x4040);
    ASSERT_EQ(static_cast<const uint16_t*>(f16.raw())[i], 0x3c00);
  }
}

TEST(CudaMemoryTest, ZeroClearsAndZerosAllocates) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  Tensor t = cuda_test::Random({777}, 2).To(Gpu());
  t.Zero();
  const Tensor z = Tensor::Zeros({333}, DType::kI64, Gpu()).To(Device::Cpu());
  const Tensor back = t.To(Device::Cpu());
  for (int64_t i = 0; i < back.numel(); ++i)
    ASSERT_EQ(back.data<float>()[i], 0);
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.data<int64_t>()[i], 0);
}

TEST(CudaMemoryTest, EmptyTensorsWork) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  Tensor t = Tensor::Empty({0, 5}, DType::kF32, Gpu());
  t.Zero();
  t.Fill(1.0);
  const Tensor back = t.To(Device::Cpu());
  EXPECT_EQ(back.numel(), 0);
}

TEST(CudaMemoryTest, ConvertRoundsToNearestEvenBfloat16) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  Tensor host = Tensor::Empty({4}, DType::kF32);
  // bfloat16 keeps 7 mantissa bits: near 1 its values are 2^-7 apart, so
  // 1 + 2^-8 and 1 + 3·2^-8 are ties, which go to the even neighbour.
  host.data<float>()[0] = 1.0f + 1.0f / 256;          // tie -> 1
  host.data<float>()[1] = 1.0f + 3.0f / 256;          // tie -> 1 + 2^-6
  host.data<float>()[2] = -2.0f;                      // exact
  host.data<float>()[3] = 1.0f + 1.0f / 256 + 1e-6f;  // above the tie
  const Tensor back =
      cuda_test::ToHost(cuda_test::ToDevice(host, DType::kBF16));
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  EXPECT_EQ(back.data<float>()[1], 1.0f + 4.0f / 256);
  EXPECT_EQ(back.data<float>()[2], -2.0f);
  EXPECT_EQ(back.data<float>()[3], 1.0f + 2.0f / 256);
}

TEST(CudaMemoryDeathTest, MixedDevicesNameTheProblem) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  // The CUDA runtime does not survive fork(); run the death in a new process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Tensor bias = Tensor::Zeros({4}, DType::kF32);
  Tensor out = Tensor::Zeros({2, 4}, DType::kF32, Gpu());
  EXPECT_DEATH(AddBias(bias, out), "AddBias: a tensor on cpu among CUDA");
}

}  // namespace
}  // namespace trellis
