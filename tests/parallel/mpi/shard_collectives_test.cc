// Reduce-scatter and all-gather on every CPU-capable communicator (MPI,
// host-staged, routing, tracing, self), run under mpirun with 2, 3 and 4
// ranks. Each result is checked against an all-reduce of the same data:
// reduce-scatter must give this rank's block of it, and all-gathering those
// blocks must give all of it. Inputs are small multiples of 1/4, so sums are
// exact in float32 whatever order the reduction takes, and the averages
// round the same way in both paths. They are exact in bfloat16 and float16
// too, which reduce in float32 and round once.
#include <memory>
#include <string>
#include <vector>

#include "framework/float16.h"
#include "framework/trace.h"
#include "gtest/gtest.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/routing_communicator.h"
#include "parallel/tracing_communicator.h"

namespace trellis {
namespace {

// Block lengths that are not powers of two or multiples of the group size.
constexpr int64_t kBlocks[] = {1, 7, 13, 1001};

// Every communicator kind over the world, each on its own MPI communicator.
class ShardCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    mpi_ = std::make_unique<MpiCommunicator>("mpi", Dup(), /*owned=*/true);
    staged_ = std::make_unique<HostStagedCommunicator>("staged", Dup(),
                                                       /*owned=*/true);
    routing_host_ =
        std::make_unique<MpiCommunicator>("routing", Dup(), /*owned=*/true);
    routing_ = std::make_unique<RoutingCommunicator>(
        *routing_host_,
        std::make_unique<HostStagedCommunicator>("routing", Dup(), true));
    traced_inner_ =
        std::make_unique<MpiCommunicator>("traced", Dup(), /*owned=*/true);
    recorder_.set_active(true);
    traced_ =
        std::make_unique<TracingCommunicator>(*traced_inner_, recorder_, 0);
  }

  static MPI_Comm Dup() {
    MPI_Comm comm;
    TRELLIS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    return comm;
  }

  std::vector<Communicator*> All() {
    return {mpi_.get(), staged_.get(), routing_.get(), traced_.get()};
  }

  // (n) values, exact multiples of 1/4, different on every rank.
  Tensor Input(int64_t n, DType dtype, int salt) const {
    Tensor t = Tensor::Empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
      const double v =
          0.25 * ((i * 7 + salt) % 23) + (rank_ + 1) * 0.5 - 0.25 * (i % 3);
      ConvertElements(&v, DType::kF64, Element(t, i), dtype, 1);
    }
    return t;
  }

  static void* Element(const Tensor& t, int64_t i) {
    return static_cast<char*>(t.raw()) + i * DTypeSize(t.dtype());
  }

  static double At(const Tensor& t, int64_t i) {
    double v = 0;
    ConvertElements(Element(t, i), t.dtype(), &v, DType::kF64, 1);
    return v;
  }

  static void ExpectSame(const Tensor& got, const Tensor& want,
                         int64_t want_offset) {
    for (int64_t i = 0; i < got.numel(); ++i) {
      ASSERT_EQ(At(got, i), At(want, want_offset + i)) << "element " << i;
    }
  }

  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<MpiCommunicator> mpi_;
  std::unique_ptr<HostStagedCommunicator> staged_;
  std::unique_ptr<MpiCommunicator> routing_host_;
  std::unique_ptr<RoutingCommunicator> routing_;
  std::unique_ptr<MpiCommunicator> traced_inner_;
  TraceRecorder recorder_{0};
  std::unique_ptr<TracingCommunicator> traced_;
};

TEST_F(ShardCollectivesTest, ScatterAndGatherMatchAllReduce) {
  for (Communicator* c : All()) {
    ASSERT_EQ(c->size(), size_);
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (int64_t n : kBlocks) {
          SCOPED_TRACE(c->name() + " " + DTypeName(dtype) + " op " +
                       std::to_string(static_cast<int>(op)) + " n " +
                       std::to_string(n));
          const Tensor input = Input(size_ * n, dtype, static_cast<int>(n));
          Tensor reduced = input.Clone();
          c->AllReduce(reduced, op);
          Tensor block = Tensor::Zeros({n}, dtype);
          c->ReduceScatter(input, block, op);
          ExpectSame(block, reduced, rank_ * n);
          Tensor gathered = Tensor::Zeros({size_ * n}, dtype);
          c->AllGather(block, gathered);
          ExpectSame(gathered, reduced, 0);
          // In place: the output is this rank's block of the input, then
          // the input of the gather is that block of the output.
          Tensor whole = input.Clone();
          Tensor own = whole.Narrow(rank_ * n, n);
          c->ReduceScatter(whole, own, op);
          ExpectSame(own, reduced, rank_ * n);
          c->AllGather(own, whole);
          ExpectSame(whole, reduced, 0);
        }
      }
    }
  }
}

TEST_F(ShardCollectivesTest, AsyncScatterAndGatherOverlapAndWaitLater) {
  for (Communicator* c : All()) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(c->name() + " " + DTypeName(dtype));
      constexpr int64_t n = 1001;
      const Tensor first = Input(size_ * n, dtype, 1);
      Tensor first_reduced = first.Clone();
      c->AllReduce(first_reduced, ReduceOp::kAvg);
      const Tensor second = Input(n, dtype, 2);
      Tensor second_gathered_ref = Tensor::Zeros({size_ * n}, dtype);
      c->AllGather(second, second_gathered_ref);

      // Start both, then an in-place pair, then a blocking call; wait later,
      // out of order.
      Tensor block = Tensor::Zeros({n}, dtype);
      Tensor gathered = Tensor::Zeros({size_ * n}, dtype);
      Tensor whole = first.Clone();
      Tensor own = whole.Narrow(rank_ * n, n);
      std::unique_ptr<Request> scatter =
          c->ReduceScatterAsync(first, block, ReduceOp::kAvg);
      std::unique_ptr<Request> gather = c->AllGatherAsync(second, gathered);
      std::unique_ptr<Request> scatter_in_place =
          c->ReduceScatterAsync(whole, own, ReduceOp::kAvg);
      double local = 0.0;
      for (int i = 0; i < 100000; ++i) local += i % 7;
      gather->Wait();
      scatter->Wait();
      scatter->Wait();  // a second wait is a no-op
      scatter_in_place->Wait();
      EXPECT_GT(local, 0.0);
      ExpectSame(block, first_reduced, rank_ * n);
      ExpectSame(gathered, second_gathered_ref, 0);
      ExpectSame(own, first_reduced, rank_ * n);
      {
        // Destroyed unwaited: waits first.
        std::unique_ptr<Request> gather_in_place =
            c->AllGatherAsync(own, whole);
      }
      ExpectSame(whole, first_reduced, 0);
    }
  }
}

TEST_F(ShardCollectivesTest, CountsScatterPlusGatherAsOneAllReduce) {
  for (Communicator* c : All()) {
    SCOPED_TRACE(c->name());
    c->ResetStats();
    constexpr int64_t n = 13;
    const int64_t full = size_ * n * 4;  // float32 bytes
    Tensor whole = Input(size_ * n, DType::kF32, 0);
    Tensor block = Tensor::Zeros({n}, DType::kF32);
    c->ReduceScatter(whole, block, ReduceOp::kSum);
    c->AllGatherAsync(block, whole)->Wait();
    c->AllReduce(whole, ReduceOp::kSum);
    const CommStats& stats = c->stats();
    EXPECT_EQ(stats.Calls(CommOp::kReduceScatter), 1);
    EXPECT_EQ(stats.Calls(CommOp::kAllGather), 1);
    EXPECT_EQ(stats.Bytes(CommOp::kReduceScatter), full);
    EXPECT_EQ(stats.Bytes(CommOp::kAllGather), full);
    EXPECT_EQ(stats.WireBytes(CommOp::kReduceScatter),
              (size_ - 1) * full / size_);
    EXPECT_EQ(stats.WireBytes(CommOp::kAllGather), (size_ - 1) * full / size_);
    EXPECT_EQ(stats.WireBytes(CommOp::kReduceScatter) +
                  stats.WireBytes(CommOp::kAllGather),
              stats.WireBytes(CommOp::kAllReduce));
  }
  // The tracing communicator records blocking calls and async waits.
  std::vector<std::string> names;
  for (const TraceSpan& s : recorder_.spans()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"reduce_scatter",
                                             "wait all_gather", "all_reduce"}));
}

TEST_F(ShardCollectivesTest, GroupOfOneCopies) {
  SelfCommunicator self("self");
  const Tensor input = Input(5, DType::kF64, 3);
  Tensor output = Tensor::Zeros({5}, DType::kF64);
  self.ReduceScatterAsync(input, output, ReduceOp::kAvg)->Wait();
  ExpectSame(output, input, 0);
  Tensor gathered = Tensor::Zeros({5}, DType::kF64);
  self.AllGatherAsync(output, gathered)->Wait();
  ExpectSame(gathered, input, 0);
  EXPECT_EQ(self.stats().WireBytes(CommOp::kAllGather), 0);
  EXPECT_EQ(self.stats().Bytes(CommOp::kReduceScatter), 40);
}

}  // namespace
}  // namespace trellis
