// MpiCommunicator with bfloat16 and float16 buffers, on 8 ranks: the world,
// two groups of 4 and four pairs. Transfers, gathers and broadcasts must move
// the 16 bits of every element unchanged (including signaling NaNs, which a
// detour through float32 would quiet); reductions must equal the float32
// reduction of the same values rounded once to the 16-bit type. Inputs are
// formulas in the rank whose reductions are exact, except in
// ReductionsRoundOnce, whose values round differently when rounded after
// every addition, in whatever order.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/float16.h"
#include "gtest/gtest.h"
#include "parallel/mpi_communicator.h"

namespace trellis {
namespace {

constexpr DType kHalfTypes[] = {DType::kBF16, DType::kF16};

struct Group {
  std::unique_ptr<MpiCommunicator> comm;
  std::vector<int> members;  // world ranks, in group-rank order
};

// The element bits of a 16-bit tensor.
uint16_t BitsAt(const Tensor& t, int64_t i) {
  return static_cast<const uint16_t*>(t.raw())[i];
}

double ValueAt(const Tensor& t, int64_t i) {
  double v = 0;
  ConvertElements(static_cast<const uint16_t*>(t.raw()) + i, t.dtype(), &v,
                  DType::kF64, 1);
  return v;
}

// Element i of what world rank `rank` sends: signaling NaNs of bfloat16 and
// of float16, negative subnormals and normal numbers, all naming the rank.
// REQUIRES: i < 16.
uint16_t Pattern(int rank, int64_t i) {
  const int r = rank;
  switch (i % 4) {
    case 0:
      return static_cast<uint16_t>(0x7f81 + r);
    case 1:
      return static_cast<uint16_t>(0x7c01 + r);
    case 2:
      return static_cast<uint16_t>(0x8000 + 0x10 * r + i);
    default:
      return static_cast<uint16_t>(0x3c00 + 0x100 * r + i);
  }
}

Tensor WithBits(const Shape& shape, DType dtype,
                const std::function<uint16_t(int64_t)>& bits) {
  Tensor t = Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    static_cast<uint16_t*>(t.raw())[i] = bits(i);
  }
  return t;
}

// REQUIRES: every value is exact in `dtype` (checked).
Tensor WithValues(const Shape& shape, DType dtype,
                  const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = value(i);
    ConvertElements(&v, DType::kF64, static_cast<uint16_t*>(t.raw()) + i, dtype,
                    1);
    EXPECT_EQ(ValueAt(t, i), v) << "input " << i << " is not exact";
  }
  return t;
}

void ExpectLayout(const Tensor& t, DType dtype, const Shape& shape) {
  EXPECT_EQ(t.dtype(), dtype);
  EXPECT_EQ(t.shape(), shape);
}

class HalfCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 8) << "run with 8 ranks";
    for (int width : {8, 4, 2}) {
      MPI_Comm comm;
      TRELLIS_MPI_CHECK(
          MPI_Comm_split(MPI_COMM_WORLD, rank_ / width, rank_, &comm));
      Group g{std::make_unique<MpiCommunicator>("width" + std::to_string(width),
                                                comm, /*owned=*/true),
              {}};
      for (int k = 0; k < width; ++k) {
        g.members.push_back(rank_ / width * width + k);
      }
      groups_.push_back(std::move(g));
    }
  }

  int rank_ = 0;
  std::vector<Group> groups_;  // the world, then groups of 4, then pairs
};

TEST_F(HalfCollectivesTest, SendRecvMovesBitsExactly) {
  const Shape shape = {3, 4};
  for (DType dtype : kHalfTypes) {
    for (Group& g : groups_) {
      SCOPED_TRACE(g.comm->name() + " " + DTypeName(dtype));
      const int size = g.comm->size(), me = g.comm->rank();
      const int to = (me + 1) % size, from = (me + size - 1) % size;
      const Tensor out =
          WithBits(shape, dtype, [&](int64_t i) { return Pattern(rank_, i); });
      Tensor in = Tensor::Zeros(shape, dtype);
      g.comm->ResetStats();
      std::unique_ptr<Request> recv = g.comm->Recv(in, from, 7);
      std::unique_ptr<Request> send = g.comm->Send(out, to, 7);
      recv->Wait();
      send->Wait();
      ExpectLayout(in, dtype, shape);
      for (int64_t i = 0; i < in.numel(); ++i) {
        ASSERT_EQ(BitsAt(in, i), Pattern(g.members[from], i)) << i;
        ASSERT_EQ(BitsAt(out, i), Pattern(rank_, i)) << i;
      }
      EXPECT_EQ(g.comm->stats().Bytes(CommOp::kSend), 24);
      EXPECT_EQ(g.comm->stats().Bytes(CommOp::kRecv), 24);
    }
  }
}

// Each rank sends to the next and back to the previous one in one batch.
TEST_F(HalfCollectivesTest, BatchSendRecvMovesBitsExactlyInBothModes) {
  for (MpiP2P p2p : {MpiP2P::kEager, MpiP2P::kRendezvous}) {
    for (DType dtype : kHalfTypes) {
      const Group& world = groups_[0];
      MPI_Comm dup;
      TRELLIS_MPI_CHECK(MPI_Comm_dup(world.comm->comm(), &dup));
      MpiCommunicator comm("world", dup, /*owned=*/true, p2p);
      SCOPED_TRACE(std::string(DTypeName(dtype)) +
                   (p2p == MpiP2P::kRendezvous ? " rendezvous" : " eager"));
      const int next = (rank_ + 1) % 8, prev = (rank_ + 7) % 8;
      const Tensor forward =
          WithBits({6}, dtype, [&](int64_t i) { return Pattern(rank_, i); });
      const Tensor backward = WithBits(
          {2, 2}, dtype, [&](int64_t i) { return Pattern(rank_, 15 - i); });
      Tensor from_prev = Tensor::Zeros({6}, dtype);
      Tensor from_next = Tensor::Zeros({2, 2}, dtype);
      using T = P2POp::Type;
      std::vector<std::unique_ptr<Request>> requests =
          comm.BatchSendRecv({P2POp{T::kSend, forward, next, 1},
                              P2POp{T::kSend, backward, prev, 2},
                              P2POp{T::kRecv, from_prev, prev, 1},
                              P2POp{T::kRecv, from_next, next, 2}});
      ASSERT_EQ(requests.size(), 4u);
      for (auto& request : requests) request->Wait();
      ExpectLayout(from_prev, dtype, {6});
      ExpectLayout(from_next, dtype, {2, 2});
      for (int64_t i = 0; i < 6; ++i) {
        ASSERT_EQ(BitsAt(from_prev, i), Pattern(prev, i)) << i;
      }
      for (int64_t i = 0; i < 4; ++i) {
        ASSERT_EQ(BitsAt(from_next, i), Pattern(next, 15 - i)) << i;
      }
      EXPECT_EQ(comm.stats().Bytes(CommOp::kSend), (6 + 4) * 2);
    }
  }
}

TEST_F(HalfCollectivesTest, AllGatherAndBroadcastMoveBitsExactly) {
  const Shape block = {2, 3};
  for (DType dtype : kHalfTypes) {
    for (Group& g : groups_) {
      SCOPED_TRACE(g.comm->name() + " " + DTypeName(dtype));
      const int size = g.comm->size(), me = g.comm->rank();
      const Shape whole = {2 * size, 3};
      const Tensor in =
          WithBits(block, dtype, [&](int64_t i) { return Pattern(rank_, i); });
      Tensor out = Tensor::Zeros(whole, dtype);
      g.comm->AllGather(in, out);
      Tensor async_out = Tensor::Zeros(whole, dtype);
      g.comm->AllGatherAsync(in, async_out)->Wait();
      // In place: this rank's block of the output holds its input.
      Tensor in_place = Tensor::Zeros(whole, dtype);
      Tensor own = in_place.Narrow(2 * me, 2);
      own.CopyFrom(in);
      g.comm->AllGather(own, in_place);
      for (const Tensor* t : {&out, &async_out, &in_place}) {
        ExpectLayout(*t, dtype, whole);
        for (int k = 0; k < size; ++k) {
          for (int64_t i = 0; i < 6; ++i) {
            ASSERT_EQ(BitsAt(*t, 6 * k + i), Pattern(g.members[k], i))
                << "block " << k << " element " << i;
          }
        }
      }
      for (int root = 0; root < size; ++root) {
        Tensor x = WithBits(block, dtype,
                            [&](int64_t i) { return Pattern(rank_, i); });
        g.comm->Broadcast(x, root);
        ExpectLayout(x, dtype, block);
        for (int64_t i = 0; i < 6; ++i) {
          ASSERT_EQ(BitsAt(x, i), Pattern(g.members[root], i))
              << "root " << root << " element " << i;
        }
      }
    }
  }
}

// Rank r holds (r + 1)/2 + i at element i: sums, averages and maxima over
// every group are exact in both 16-bit types.
TEST_F(HalfCollectivesTest, AllReduceSumAvgMaxSyncAndAsync) {
  const Shape shape = {2, 3};
  for (DType dtype : kHalfTypes) {
    for (Group& g : groups_) {
      const int size = g.comm->size();
      int member_sum = 0, member_max = 0;
      for (int m : g.members) {
        member_sum += m;
        member_max = std::max(member_max, m);
      }
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        for (bool async : {false, true}) {
          SCOPED_TRACE(g.comm->name() + " " + DTypeName(dtype) + " op " +
                       std::to_string(static_cast<int>(op)) +
                       (async ? " async" : ""));
          Tensor x = WithValues(
              shape, dtype, [&](int64_t i) { return 0.5 * (rank_ + 1) + i; });
          if (!async) {
            g.comm->AllReduce(x, op);
          } else if (op == ReduceOp::kSum) {
            std::unique_ptr<Request> request = g.comm->AllReduceAsync(x, op);
            while (!request->Poll()) {
            }
          } else {
            g.comm->AllReduceAsync(x, op)->Wait();
          }
          ExpectLayout(x, dtype, shape);
          for (int64_t i = 0; i < 6; ++i) {
            const double sum = 0.5 * (member_sum + size) + size * i;
            const double want = op == ReduceOp::kSum ? sum
                                : op == ReduceOp::kAvg
                                    ? sum / size
                                    : 0.5 * (member_max + 1) + i;
            EXPECT_EQ(ValueAt(x, i), want) << "element " << i;
          }
        }
      }
    }
  }
}

// Rank r holds (r + 1)/2 + j at element j of the whole input; each rank's
// block is reduced, into a separate output and in place, sync and async.
TEST_F(HalfCollectivesTest, ReduceScatterSumAvgSyncAndAsync) {
  constexpr int n = 3;
  for (DType dtype : kHalfTypes) {
    for (Group& g : groups_) {
      const int size = g.comm->size(), me = g.comm->rank();
      int member_sum = 0;
      for (int m : g.members) member_sum += m;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (bool async : {false, true}) {
          SCOPED_TRACE(g.comm->name() + " " + DTypeName(dtype) + " op " +
                       std::to_string(static_cast<int>(op)) +
                       (async ? " async" : ""));
          const Tensor input = WithValues({size * n}, dtype, [&](int64_t j) {
            return 0.5 * (rank_ + 1) + j;
          });
          Tensor out = Tensor::Zeros({n}, dtype);
          Tensor whole = input.Clone();
          Tensor own = whole.Narrow(me * n, n);
          if (async) {
            std::unique_ptr<Request> scatter =
                g.comm->ReduceScatterAsync(input, out, op);
            std::unique_ptr<Request> in_place =
                g.comm->ReduceScatterAsync(whole, own, op);
            in_place->Wait();
            scatter->Wait();
          } else {
            g.comm->ReduceScatter(input, out, op);
            g.comm->ReduceScatter(whole, own, op);
          }
          ExpectLayout(out, dtype, {n});
          ExpectLayout(whole, dtype, {size * n});
          for (int64_t i = 0; i < n; ++i) {
            const double sum = 0.5 * (member_sum + size) + size * (me * n + i);
            const double want = op == ReduceOp::kSum ? sum : sum / size;
            EXPECT_EQ(ValueAt(out, i), want) << "element " << i;
            EXPECT_EQ(ValueAt(own, i), want) << "element " << i;
          }
        }
      }
    }
  }
}

// Four values whose float32 sum rounds to one 16-bit value, while rounding
// after every addition, in any order and grouping, gives another:
//   bfloat16: 360 + 448 + 468 + 31 = 1307 -> 1304 (per addition: 1312),
//             average 326.75 -> 326 (per addition: 328);
//   float16:  2992 + 3388 + 49 + 3112 = 9541 -> 9544 (per addition: 9536),
//             average 2385.25 -> 2386 (per addition: 2384).
TEST_F(HalfCollectivesTest, ReductionsRoundOnce) {
  struct Case {
    DType dtype;
    double values[4];
    double sum, avg;
  };
  const Case cases[] = {{DType::kBF16, {360, 448, 468, 31}, 1304, 326},
                        {DType::kF16, {2992, 3388, 49, 3112}, 9544, 2386}};
  Communicator& quad = *groups_[1].comm;
  ASSERT_EQ(quad.size(), 4);
  const int me = quad.rank();
  for (const Case& c : cases) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      SCOPED_TRACE(std::string(DTypeName(c.dtype)) + " op " +
                   std::to_string(static_cast<int>(op)));
      const double want = op == ReduceOp::kSum ? c.sum : c.avg;
      auto mine = [&](int64_t) { return c.values[me]; };
      Tensor x = WithValues({2}, c.dtype, mine);
      quad.AllReduce(x, op);
      Tensor y = WithValues({2}, c.dtype, mine);
      quad.AllReduceAsync(y, op)->Wait();
      Tensor z = WithValues({2}, c.dtype, mine);
      {
        // Destroyed unwaited: waits, and rounds, first.
        std::unique_ptr<Request> unwaited = quad.AllReduceAsync(z, op);
      }
      const Tensor input = WithValues({4 * 2}, c.dtype, mine);
      Tensor block = Tensor::Zeros({2}, c.dtype);
      quad.ReduceScatter(input, block, op);
      Tensor async_block = Tensor::Zeros({2}, c.dtype);
      quad.ReduceScatterAsync(input, async_block, op)->Wait();
      for (const Tensor* t : {&x, &y, &z, &block, &async_block}) {
        ExpectLayout(*t, c.dtype, {2});
        for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(ValueAt(*t, i), want);
      }
    }
  }
}

// Bytes and wire bytes are those of the caller's 16-bit buffers, counted
// once per call (the float32 copies a reduction uses are not counted).
TEST_F(HalfCollectivesTest, CountsTheCallersBytes) {
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Communicator& world = *groups_[0].comm;
    world.ResetStats();
    Tensor x = WithValues({10}, dtype, [](int64_t i) { return 1.0 * i; });
    world.AllReduce(x, ReduceOp::kSum);
    world.AllReduceAsync(x, ReduceOp::kAvg)->Wait();
    Tensor whole = Tensor::Zeros({80}, dtype);
    world.ReduceScatter(whole, x, ReduceOp::kSum);
    world.ReduceScatterAsync(whole, x, ReduceOp::kAvg)->Wait();
    world.AllGather(x, whole);
    world.Broadcast(x, 3);
    const CommStats& s = world.stats();
    EXPECT_EQ(s.Calls(CommOp::kAllReduce), 2);
    EXPECT_EQ(s.Bytes(CommOp::kAllReduce), 2 * 20);
    EXPECT_EQ(s.WireBytes(CommOp::kAllReduce), 2 * (2 * 7 * 20 / 8));
    EXPECT_EQ(s.Calls(CommOp::kReduceScatter), 2);
    EXPECT_EQ(s.Bytes(CommOp::kReduceScatter), 2 * 160);
    EXPECT_EQ(s.WireBytes(CommOp::kReduceScatter), 2 * (7 * 160 / 8));
    EXPECT_EQ(s.Calls(CommOp::kAllGather), 1);
    EXPECT_EQ(s.Bytes(CommOp::kAllGather), 160);
    EXPECT_EQ(s.Calls(CommOp::kBroadcast), 1);
    EXPECT_EQ(s.Bytes(CommOp::kBroadcast), 20);
  }
}

}  // namespace
}  // namespace trellis
