// NcclCommunicator with one rank (NCCL takes one rank per GPU, and the test
// machine may have one): every collective runs through NCCL, ordered with
// the kernels around it, and is counted. Run under mpirun -np 1.
#include "parallel/nccl_communicator.h"

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/kernels/elementwise.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::Gpu;

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TRELLIS_REQUIRE_CUDA_DEVICE();
    const absl::StatusOr<int> device = SelectCudaDevice();
    ASSERT_TRUE(device.ok()) << device.status();
    world_ = NcclCommunicator::CreateWorld("world", MPI_COMM_WORLD, *device);
    ASSERT_EQ(world_->size(), 1);
  }

  // Element i of a ramp: exact in bfloat16 too for offsets below 10.
  static float RampAt(int64_t i, float offset) {
    return 0.5f * static_cast<float>(i % 100) + offset;
  }

  // (n) ramp values on the device, in `dtype`.
  Tensor Ramp(int64_t n, float offset, DType dtype = DType::kF32) {
    Tensor host = Tensor::Empty({n}, DType::kF32);
    for (int64_t i = 0; i < n; ++i) host.data<float>()[i] = RampAt(i, offset);
    return cuda_test::ToDevice(host, dtype);
  }

  static void ExpectRamp(const Tensor& device, float offset) {
    const Tensor host = cuda_test::ToHost(device);
    for (int64_t i = 0; i < host.numel(); ++i) {
      ASSERT_EQ(host.data<float>()[i], RampAt(i, offset)) << i;
    }
  }

  std::unique_ptr<NcclCommunicator> world_;
};

TEST_F(NcclCommunicatorTest, ReductionsOfOneRankKeepTheValues) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      Tensor buffer = Ramp(1000, 1.0f, dtype);
      world_->AllReduce(buffer, op);
      ExpectRamp(buffer, 1.0f);
    }
  }
  EXPECT_EQ(world_->stats().Calls(CommOp::kAllReduce), 6);
  EXPECT_EQ(world_->stats().Bytes(CommOp::kAllReduce),
            3 * (1000 * 4 + 1000 * 2));
}

TEST_F(NcclCommunicatorTest, CollectivesAreOrderedWithKernels) {
  // Kernel, collective, kernel, copy: each sees the one before.
  Tensor buffer = Tensor::Empty({1 << 20}, DType::kF32, Gpu());
  buffer.Fill(3.0);
  world_->AllReduce(buffer, ReduceOp::kSum);
  Scale(buffer, 2.0);
  auto request = world_->AllReduceAsync(buffer, ReduceOp::kSum);
  request->Wait();
  Scale(buffer, 0.5);
  const Tensor host = buffer.To(Device::Cpu());
  for (int64_t i = 0; i < host.numel(); i += 4099) {
    ASSERT_EQ(host.data<float>()[i], 3.0f) << i;
  }
}

TEST_F(NcclCommunicatorTest, GatherScatterBroadcastAndBarrier) {
  const Tensor input = Ramp(96, 2.0f);
  Tensor gathered = Tensor::Zeros({96}, DType::kF32, Gpu());
  world_->AllGather(input, gathered);
  ExpectRamp(gathered, 2.0f);

  Tensor scattered = Tensor::Zeros({96}, DType::kF32, Gpu());
  world_->ReduceScatter(input, scattered, ReduceOp::kSum);
  ExpectRamp(scattered, 2.0f);

  // In place: the input is the output's own block.
  Tensor in_place = Ramp(96, 4.0f);
  world_->ReduceScatter(in_place, in_place, ReduceOp::kSum);
  ExpectRamp(in_place, 4.0f);

  Tensor ids = Tensor::Empty({5}, DType::kU16, Gpu());  // moved as bytes
  ids.Fill(7);
  world_->Broadcast(ids, 0);
  const Tensor host_ids = ids.To(Device::Cpu());
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(host_ids.data<uint16_t>()[i], 7);

  world_->Barrier();
  const CommStats& stats = world_->stats();
  EXPECT_EQ(stats.Calls(CommOp::kAllGather), 1);
  EXPECT_EQ(stats.Bytes(CommOp::kAllGather), 96 * 4);
  EXPECT_EQ(stats.Calls(CommOp::kReduceScatter), 2);
  EXPECT_EQ(stats.Calls(CommOp::kBroadcast), 1);
  EXPECT_EQ(stats.Bytes(CommOp::kBroadcast), 10);
  EXPECT_EQ(stats.Calls(CommOp::kBarrier), 1);
}

TEST_F(NcclCommunicatorTest, AsyncScatterAndGatherAreOrderedWithKernels) {
  // Kernel, async collectives, wait, kernel: each sees the one before.
  Tensor whole = Tensor::Empty({1 << 20}, DType::kF32, Gpu());
  whole.Fill(3.0);
  Scale(whole, 2.0);
  Tensor block = Tensor::Zeros({1 << 20}, DType::kF32, Gpu());
  auto scatter = world_->ReduceScatterAsync(whole, block, ReduceOp::kAvg);
  auto in_place = world_->AllGatherAsync(whole, whole);
  // Buffers that overlap without being in place (views of one buffer,
  // shifted by half) go through a scratch block the request keeps alive.
  Tensor base = Ramp(144, 1.0f);
  const Tensor input = base.Narrow(0, 96);
  Tensor shifted = base.Narrow(48, 96);
  auto overlapping = world_->ReduceScatterAsync(input, shifted, ReduceOp::kSum);
  Tensor gather_base = Ramp(144, 2.0f);
  const Tensor gather_input = gather_base.Narrow(48, 96);
  Tensor gather_output = gather_base.Narrow(0, 96);
  auto gather = world_->AllGatherAsync(gather_input, gather_output);
  gather->Wait();
  overlapping->Wait();
  scatter->Wait();
  in_place->Wait();
  Scale(block, 0.5);
  const Tensor host = block.To(Device::Cpu());
  for (int64_t i = 0; i < host.numel(); i += 4099) {
    ASSERT_EQ(host.data<float>()[i], 3.0f) << i;
  }
  ExpectRamp(shifted, 1.0f);  // what the input held, element by element
  const Tensor gathered = cuda_test::ToHost(gather_output);
  for (int64_t i = 0; i < 96; ++i) {
    ASSERT_EQ(gathered.data<float>()[i], RampAt(48 + i, 2.0f)) << i;
  }
  const CommStats& stats = world_->stats();
  EXPECT_EQ(stats.Calls(CommOp::kReduceScatter), 2);
  EXPECT_EQ(stats.Calls(CommOp::kAllGather), 2);
  EXPECT_EQ(stats.Bytes(CommOp::kReduceScatter), (1 << 20) * 4 + 96 * 4);
  EXPECT_EQ(stats.WireBytes(CommOp::kAllGather), 0);  // a group of one
}

TEST_F(NcclCommunicatorTest, SplitMakesGroupsAndSkipsNoColor) {
  std::unique_ptr<NcclCommunicator> tp = world_->Split("tp", 0, 0);
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->name(), "tp");
  EXPECT_EQ(tp->rank(), 0);
  EXPECT_EQ(tp->size(), 1);
  EXPECT_EQ(tp->device(), world_->device());
  Tensor buffer = Ramp(64, 1.0f);
  tp->AllReduce(buffer, ReduceOp::kSum);
  ExpectRamp(buffer, 1.0f);
  EXPECT_EQ(tp->stats().Calls(CommOp::kAllReduce), 1);
  EXPECT_EQ(world_->stats().Calls(CommOp::kAllReduce), 0);

  EXPECT_EQ(world_->Split("none", NcclCommunicator::kNoColor, 0), nullptr);
}

}  // namespace
}  // namespace trellis
