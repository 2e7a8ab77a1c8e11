// Pieces replicated over sub-groups of tp (ShardSpec group_parts): which
// logical columns a rank holds, which it owns, and the squares the gradient
// norm leaves out on a rank that does not own its replicated pieces,
// over any flat range of the gradient (ZeRO's segments cut rows anywhere).
#include "parallel/replicas.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

TEST(ReplicasTest, BadPieceCountsAreInvariantFailures) {
  // 3 pieces do not divide 4 ranks.
  EXPECT_DEATH(ShardSpec::SplitGroups({3, 24}, 1, 4, 0, {12, 6, 6}, {4, 3, 3}),
               "pieces over 4 ranks");
}

}  // namespace
}  // namespace trellis
