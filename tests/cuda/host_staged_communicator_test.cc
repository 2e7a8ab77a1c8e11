// HostStagedCommunicator on two ranks: with host buffers (any machine) and
// with buffers on a GPU that both ranks share (skipped without one), in
// float32 and bfloat16. Expected values are formulas in the rank. Run under
// mpirun -np 2.
#include "parallel/host_staged_communicator.h"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/cuda/cuda_device.h"
#include "framework/float16.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

class HostStagedTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      TRELLIS_REQUIRE_CUDA_DEVICE();
      const absl::StatusOr<int> index = SelectCudaDevice();
      ASSERT_TRUE(index.ok()) << index.status();
      device_ = Device::Cuda(*index);
    }
    MPI_Comm comm;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
    comm_ = std::make_unique<HostStagedCommunicator>("world", comm, true);
    ASSERT_EQ(comm_->size(), 2);
    rank_ = comm_->rank();
  }

  // values[i] on device_, float32.
  Tensor Make(const std::vector<float>& values) {
    Tensor host =
        Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kF32);
    for (size_t i = 0; i < values.size(); ++i)
      host.data<float>()[i] = values[i];
    return host.To(device_);
  }

  static std::vector<float> Read(const Tensor& t) {
    const Tensor host = t.To(Device::Cpu());
    return std::vector<float>(host.data<float>(),
                              host.data<float>() + host.numel());
  }

  // values[i] on device_, bfloat16. REQUIRES: each value is exact in it.
  Tensor MakeBf16(const std::vector<float>& values) {
    const int64_t n = static_cast<int64_t>(values.size());
    Tensor host = Tensor::Empty({n}, DType::kBF16);
    ConvertElements(values.data(), DType::kF32, host.raw(), DType::kBF16, n);
    return host.To(device_);
  }

  // A bfloat16 tensor's values, widened.
  static std::vector<float> ReadBf16(const Tensor& t) {
    EXPECT_EQ(t.dtype(), DType::kBF16);
    const Tensor host = t.To(Device::Cpu());
    std::vector<float> values(host.numel());
    ConvertElements(host.raw(), DType::kBF16, values.data(), DType::kF32,
                    host.numel());
    return values;
  }

  Device device_ = Device::Cpu();
  std::unique_ptr<HostStagedCommunicator> comm_;
  int rank_ = 0;
};

TEST_P(HostStagedTest, Reductions) {
  const float r = static_cast<float>(rank_);
  Tensor sum = Make({r, 10 + r, 100 * r});
  comm_->AllReduce(sum, ReduceOp::kSum);
  EXPECT_EQ(Read(sum), (std::vector<float>{1, 21, 100}));
  EXPECT_EQ(sum.device(), device_);

  Tensor avg = Make({2 * r, 4 + r});
  comm_->AllReduceAsync(avg, ReduceOp::kAvg)->Wait();
  EXPECT_EQ(Read(avg), (std::vector<float>{1, 4.5f}));

  Tensor max = Make({r, -r});
  comm_->AllReduce(max, ReduceOp::kMax);
  EXPECT_EQ(Read(max), (std::vector<float>{1, 0}));

  // Rank q's block q of the sum over ranks of (k + rank) · (block + 1).
  const Tensor input = Make({1 + r, 2 + 2 * r, 3 + 3 * r, 4 + 4 * r});
  Tensor block = Make({0, 0});
  comm_->ReduceScatter(input, block, ReduceOp::kSum);
  const float b = static_cast<float>(2 * rank_);
  EXPECT_EQ(Read(block), (std::vector<float>{3 * (b + 1), 3 * (b + 2)}));
  EXPECT_EQ(comm_->stats().Calls(CommOp::kAllReduce), 3);
  EXPECT_EQ(comm_->stats().Bytes(CommOp::kReduceScatter), 16);
}

TEST_P(HostStagedTest, GatherBroadcastAndTransfers) {
  const float r = static_cast<float>(rank_);
  Tensor gathered = Make({-1, -1, -1, -1});
  comm_->AllGather(Make({r, 10 * r}), gathered);
  EXPECT_EQ(Read(gathered), (std::vector<float>{0, 0, 1, 10}));

  Tensor value = Make({r + 5});
  comm_->Broadcast(value, 1);
  EXPECT_EQ(Read(value), (std::vector<float>{6}));

  // Rank 0 sends, rank 1 receives; then back the other way.
  const int peer = 1 - rank_;
  Tensor message = Make({7 + r, 8 + r, 9 + r});
  Tensor received = Make({0, 0, 0});
  if (rank_ == 0) {
    comm_->Send(message, peer, 3)->Wait();
    comm_->Recv(received, peer, 4)->Wait();
    EXPECT_EQ(Read(received), (std::vector<float>{8, 9, 10}));
  } else {
    comm_->Recv(received, peer, 3)->Wait();
    comm_->Send(message, peer, 4)->Wait();
    EXPECT_EQ(Read(received), (std::vector<float>{7, 8, 9}));
  }
  comm_->Barrier();
  EXPECT_EQ(comm_->stats().Calls(CommOp::kSend), 1);
  EXPECT_EQ(comm_->stats().Bytes(CommOp::kRecv), 12);
}

// Both ranks send and receive in one batch; received device buffers hold
// the peer's values once their requests are waited on.
TEST_P(HostStagedTest, BatchSendRecvExchanges) {
  const float r = static_cast<float>(rank_);
  const int peer = 1 - rank_;
  Tensor out = Make({1 + r, 2 + r});
  Tensor in = Make({0, 0});
  using T = P2POp::Type;
  std::vector<std::unique_ptr<Request>> requests = comm_->BatchSendRecv(
      {P2POp{T::kSend, out, peer, 6}, P2POp{T::kRecv, in, peer, 6}});
  ASSERT_EQ(requests.size(), 2u);
  for (auto& request : requests) request->Wait();
  const float p = static_cast<float>(peer);
  EXPECT_EQ(Read(in), (std::vector<float>{1 + p, 2 + p}));
  EXPECT_EQ(in.device(), device_);
  EXPECT_EQ(comm_->stats().Calls(CommOp::kSend), 1);
  EXPECT_EQ(comm_->stats().Calls(CommOp::kRecv), 1);
  EXPECT_EQ(comm_->mpi().stats().Calls(CommOp::kRecv), 1);
}

// bfloat16 buffers, as activations and pipeline messages are under
// --precision=bf16: reductions run in float32 and round once (256 + 1 and
// 256 + 3 fall halfway between bfloat16 neighbours and round to the even
// one); transfers move the values unchanged.
TEST_P(HostStagedTest, BFloat16ReductionsAndTransfers) {
  const float r = static_cast<float>(rank_);
  Tensor sum = MakeBf16({r, 10 + r, 0.5f + r, 256 - 255 * r, 256 - 253 * r});
  comm_->AllReduce(sum, ReduceOp::kSum);
  EXPECT_EQ(ReadBf16(sum), (std::vector<float>{1, 21, 2, 256, 260}));
  EXPECT_EQ(sum.device(), device_);

  Tensor avg = MakeBf16({2 * r, 4 + r});
  comm_->AllReduceAsync(avg, ReduceOp::kAvg)->Wait();
  EXPECT_EQ(ReadBf16(avg), (std::vector<float>{1, 4.5f}));
  EXPECT_EQ(avg.device(), device_);

  // Rank 0 sends, rank 1 receives; then both exchange in one batch.
  const int peer = 1 - rank_;
  const float p = static_cast<float>(peer);
  Tensor message = MakeBf16({7 + r, -0.375f * (1 + r), 0x1p-100f});
  Tensor received = MakeBf16({0, 0, 0});
  if (rank_ == 0) {
    comm_->Send(message, peer, 3)->Wait();
  } else {
    comm_->Recv(received, peer, 3)->Wait();
    EXPECT_EQ(ReadBf16(received), (std::vector<float>{7, -0.375f, 0x1p-100f}));
    EXPECT_EQ(received.device(), device_);
  }
  Tensor in = MakeBf16({0, 0, 0});
  using T = P2POp::Type;
  std::vector<std::unique_ptr<Request>> requests = comm_->BatchSendRecv(
      {P2POp{T::kSend, message, peer, 6}, P2POp{T::kRecv, in, peer, 6}});
  for (auto& request : requests) request->Wait();
  EXPECT_EQ(ReadBf16(in),
            (std::vector<float>{7 + p, -0.375f * (1 + p), 0x1p-100f}));
  EXPECT_EQ(in.device(), device_);
  comm_->Barrier();
  EXPECT_EQ(comm_->stats().Bytes(CommOp::kAllReduce), 10 + 4);
  EXPECT_EQ(comm_->stats().Bytes(CommOp::kSend), rank_ == 0 ? 12 : 6);
}

// Async reduce-scatter and all-gather, in place and not, started together
// and waited on out of order; their halves add up to one all-reduce.
TEST_P(HostStagedTest, AsyncScatterAndGather) {
  const float r = static_cast<float>(rank_);
  // Sum over ranks of (k + 1)(1 + r) for element k: 3(k + 1).
  const Tensor input = Make({1 + r, 2 + 2 * r, 3 + 3 * r, 4 + 4 * r});
  Tensor block = Make({0, 0});
  Tensor whole = Make({1 + r, 2 + 2 * r, 3 + 3 * r, 4 + 4 * r});
  Tensor own = whole.Narrow(2 * rank_, 2);
  auto scatter = comm_->ReduceScatterAsync(input, block, ReduceOp::kAvg);
  auto scatter_in_place = comm_->ReduceScatterAsync(whole, own, ReduceOp::kSum);
  scatter_in_place->Wait();
  scatter->Wait();
  const float b = static_cast<float>(2 * rank_);
  EXPECT_EQ(Read(block), (std::vector<float>{1.5f * (b + 1), 1.5f * (b + 2)}));
  EXPECT_EQ(Read(own), (std::vector<float>{3 * (b + 1), 3 * (b + 2)}));
  EXPECT_EQ(block.device(), device_);

  Tensor gathered = Make({-1, -1, -1, -1});
  auto gather = comm_->AllGatherAsync(own, gathered);
  auto gather_in_place = comm_->AllGatherAsync(own, whole);
  gather->Wait();
  gather_in_place->Wait();
  EXPECT_EQ(Read(gathered), (std::vector<float>{3, 6, 9, 12}));
  EXPECT_EQ(Read(whole), (std::vector<float>{3, 6, 9, 12}));

  Tensor reduced = Make({1 + r, 2 + 2 * r, 3 + 3 * r, 4 + 4 * r});
  comm_->AllReduce(reduced, ReduceOp::kSum);
  EXPECT_EQ(Read(reduced), Read(whole));
  const CommStats& stats = comm_->stats();
  EXPECT_EQ(stats.Calls(CommOp::kReduceScatter), 2);
  EXPECT_EQ(stats.Calls(CommOp::kAllGather), 2);
  EXPECT_EQ(stats.WireBytes(CommOp::kReduceScatter), 2 * 8);
  EXPECT_EQ(stats.WireBytes(CommOp::kAllGather), 2 * 8);
  EXPECT_EQ(stats.WireBytes(CommOp::kAllReduce), 16);
}

INSTANTIATE_TEST_SUITE_P(Buffers, HostStagedTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Gpu" : "Cpu";
                         });

}  // namespace
}  // namespace trellis
