// Pieces replicated over sub-groups of tp (ShardSpec group_parts): which
// logical columns a rank holds, which it owns, and the squares the gradient
// norm leaves out on a rank that does not own its replicated pieces,
// over any flat range of the gradient (ZeRO's segments cut rows anywhere).
#include "parallel/replicas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/shard.h"

namespace trellis {
namespace {

// [Q 16 | K 4 | V 4] columns of a (3, 24) weight over tp 4: Q split four
// ways, K and V cut into 2 pieces each replicated over 2 ranks.
ShardSpec QkvSpec(int64_t rank) {
  return ShardSpec::SplitGroups({3, 24}, 1, 4, rank, {16, 4, 4}, {4, 2, 2});
}

TEST(ReplicasTest, RanksHoldTheirSubGroupsPiece) {
  for (int64_t rank = 0; rank < 4; ++rank) {
    const ShardSpec spec = QkvSpec(rank);
    EXPECT_EQ(spec.LocalShape(), (Shape{3, 8}));
    EXPECT_TRUE(spec.has_replicated_pieces());
    // Q columns 4·rank.., then K and V piece rank / 2.
    EXPECT_EQ(spec.LogicalIndex(0), 4 * rank);
    EXPECT_EQ(spec.LogicalIndex(4), 16 + 2 * (rank / 2));
    EXPECT_EQ(spec.LogicalIndex(6), 20 + 2 * (rank / 2));
    const std::vector<ShardSpec::ReplicatedPiece> pieces =
        spec.ReplicatedPieces();
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_EQ(pieces[1].local_start, 6);
    EXPECT_EQ(pieces[1].logical_start, 20 + 2 * (rank / 2));
    EXPECT_EQ(pieces[1].block_start, 20);
    EXPECT_EQ(pieces[1].replicas, 2);
    EXPECT_EQ(pieces[1].owned, rank % 2 == 0);
  }
  // A plain split reports no replication and owns all it holds.
  const ShardSpec plain =
      ShardSpec::SplitGroups({3, 24}, 1, 2, 1, {16, 4, 4}, {2, 2, 2});
  EXPECT_FALSE(plain.has_replicated_pieces());
  EXPECT_TRUE(plain.group_parts.empty());
}

TEST(ReplicasTest, OwnersStoreEachColumnOnce) {
  // Over the four ranks, the owned runs cover every logical column once.
  std::vector<int> stored(24, 0);
  for (int64_t rank = 0; rank < 4; ++rank) {
    const ShardSpec spec = QkvSpec(rank);
    for (const ShardSpec::Run& run : spec.OwnedRuns()) {
      for (int64_t j = 0; j < run.length; ++j) {
        EXPECT_EQ(spec.LogicalIndex(run.local_start + j),
                  run.logical_start + j);
        ++stored[run.logical_start + j];
      }
    }
  }
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(stored[i], 1) << "column " << i;
  // A non-owner's runs are its query columns alone.
  const std::vector<ShardSpec::Run> runs = QkvSpec(3).OwnedRuns();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].local_start, 0);
  EXPECT_EQ(runs[0].logical_start, 12);
  EXPECT_EQ(runs[0].length, 4);
}

TEST(ReplicasTest, UnownedSquaresCoverExactlyTheReplicasColumns) {
  for (int64_t rank : {0, 1}) {
    Parameter p;
    p.name = "qkv";
    p.spec = QkvSpec(rank);
    p.grad = Tensor::Empty(p.spec.LocalShape(), DType::kF32);
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      p.grad.data<float>()[i] = 0.5f + static_cast<float>(i);
    }
    // Every flat range, by brute force over its elements: local columns
    // 4..7 (K and V pieces) count on the non-owner (rank 1) only.
    for (int64_t begin = 0; begin <= 24; ++begin) {
      for (int64_t end = begin; end <= 24; ++end) {
        double want = 0;
        for (int64_t i = begin; i < end; ++i) {
          const double g = p.grad.data<float>()[i];
          if (rank == 1 && i % 8 >= 4) want += g * g;
        }
        EXPECT_EQ(UnownedGradSquares({{&p, begin, end}}), want)
            << "rank " << rank << " [" << begin << ", " << end << ")";
      }
    }
  }
}

// The squares of a range held apart from the parameter (a ZeRO shard's
// piece, GradRange::grad) are those of the same elements of its gradient.
TEST(ReplicasTest, UnownedSquaresReadARangesOwnTensor) {
  Parameter p;
  p.name = "qkv";
  p.spec = QkvSpec(1);
  p.grad = Tensor::Empty(p.spec.LocalShape(), DType::kF32);
  for (int64_t i = 0; i < p.grad.numel(); ++i) {
    p.grad.data<float>()[i] = 0.5f + static_cast<float>(i);
  }
  for (int64_t begin = 0; begin <= 24; ++begin) {
    for (int64_t end = begin; end <= 24; ++end) {
      Tensor piece = Tensor::Empty({end - begin}, DType::kF32);
      for (int64_t i = begin; i < end; ++i) {
        piece.data<float>()[i - begin] = p.grad.data<float>()[i];
      }
      Parameter gone = p;
      gone.grad = Tensor();
      EXPECT_EQ(UnownedGradSquares({{&gone, begin, end, piece}}),
                UnownedGradSquares({{&p, begin, end}}))
          << "[" << begin << ", " << end << ")";
    }
  }
}

// A tp group of four simulated in one process, rank by rank: a first pass
// records what each rank all-reduces, a second gives each rank the sum of
// the recorded buffers (in rank order), after checking that it passes the
// buffer it passed the first time.
class RecordedSum : public Communicator {
 public:
  RecordedSum(int rank, std::vector<std::vector<float>>& recorded, bool replay)
      : Communicator("tp", rank, 4), recorded_(recorded), replay_(replay) {}

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor& buffer, ReduceOp op,
                                       bool) override {
    EXPECT_EQ(op, ReduceOp::kSum);
    float* data = buffer.data<float>();
    std::vector<float> mine(data, data + buffer.numel());
    if (!replay_) {
      recorded_[rank()] = mine;
      return std::make_unique<DoneRequest>();
    }
    EXPECT_EQ(mine, recorded_[rank()]) << "rank " << rank();
    for (int64_t i = 0; i < buffer.numel(); ++i) {
      float sum = 0;
      for (const std::vector<float>& r : recorded_) {
        EXPECT_EQ(r.size(), mine.size()) << "buffers of different sizes";
        if (static_cast<size_t>(i) < r.size()) sum += r[i];
      }
      data[i] = sum;
    }
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> DoReduceScatter(const Tensor&, Tensor&, ReduceOp,
                                           bool) override {
    ADD_FAILURE() << "reduce-scatter";
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> DoAllGather(const Tensor&, Tensor&, bool) override {
    ADD_FAILURE() << "all-gather";
    return std::make_unique<DoneRequest>();
  }
  void DoBroadcast(Tensor&, int) override { ADD_FAILURE() << "broadcast"; }
  std::unique_ptr<Request> DoSend(const Tensor&, int, int) override {
    ADD_FAILURE() << "send";
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> DoRecv(Tensor&, int, int) override {
    ADD_FAILURE() << "recv";
    return std::make_unique<DoneRequest>();
  }
  void DoBarrier() override { ADD_FAILURE() << "barrier"; }

 private:
  std::vector<std::vector<float>>& recorded_;
  bool replay_;
};

// On any flat range (ZeRO's owned blocks cut rows anywhere), held in the
// parameter's gradient or in a tensor of its own: each replicated element
// of the range becomes the sum over the ranks holding its piece (ranks
// 2k and 2k + 1 here), every other element stays as it was.
TEST(ReplicasTest, SumsReplicatedElementsOfAnyRange) {
  auto value = [](int64_t rank, int64_t i) {
    return 0.25f + static_cast<float>(100 * rank + i);
  };
  for (const bool own_tensor : {false, true}) {
    for (int64_t begin = 0; begin <= 24; ++begin) {
      for (int64_t end = begin; end <= 24; ++end) {
        SCOPED_TRACE(::testing::Message()
                     << "[" << begin << ", " << end << ")"
                     << (own_tensor ? " in its own tensor" : ""));
        std::vector<Parameter> params(4);
        std::vector<Tensor> pieces(4);
        for (int64_t r = 0; r < 4; ++r) {
          params[r].name = "qkv";
          params[r].spec = QkvSpec(r);
          params[r].grad = Tensor::Empty({3, 8}, DType::kF32);
          pieces[r] = Tensor::Empty({end - begin}, DType::kF32);
          for (int64_t i = 0; i < 24; ++i) {
            params[r].grad.data<float>()[i] = value(r, i);
            if (i >= begin && i < end) {
              pieces[r].data<float>()[i - begin] = value(r, i);
            }
          }
        }
        std::vector<std::vector<float>> recorded(4);
        for (const bool replay : {false, true}) {
          for (int r = 0; r < 4; ++r) {
            RecordedSum tp(r, recorded, replay);
            SumReplicatedGradients(
                tp,
                std::vector<GradRange>{{&params[r], begin, end,
                                        own_tensor ? pieces[r] : Tensor()}});
          }
        }
        for (int64_t r = 0; r < 4; ++r) {
          const int64_t partner = r ^ 1;
          for (int64_t i = 0; i < 24; ++i) {
            const bool in = i >= begin && i < end;
            const bool replicated = i % 8 >= 4;
            float want = value(r, i);
            if (in && replicated) want += value(partner, i);
            const float got = own_tensor && in
                                  ? pieces[r].data<float>()[i - begin]
                                  : params[r].grad.data<float>()[i];
            EXPECT_EQ(got, want) << "rank " << r << " element " << i;
          }
        }
      }
    }
  }
}

TEST(ReplicasTest, BadPieceCountsAreInvariantFailures) {
  // 3 pieces do not divide 4 ranks.
  EXPECT_DEATH(ShardSpec::SplitGroups({3, 24}, 1, 4, 0, {12, 6, 6}, {4, 3, 3}),
               "pieces over 4 ranks");
}

}  // namespace
}  // namespace trellis
