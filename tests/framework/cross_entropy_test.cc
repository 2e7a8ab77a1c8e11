#include "framework/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Cast;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;
using kernel_test::Set;

Tensor Targets(const std::vector<int32_t>& values) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

struct Result {
  Tensor losses;   // (N)
  Tensor dlogits;  // (N, Vl)
};

// The whole decomposition on one shard holding the full vocabulary, where
// the reductions over the vocabulary group are identities.
Result OneShard(const Tensor& logits, const Tensor& targets, int64_t valid,
                double scale) {
  const int64_t N = logits.dim(0);
  const DType dtype = logits.dtype();
  Tensor row_max = Tensor::Empty({N}, dtype),
         sumexp = Tensor::Empty({N}, dtype);
  Tensor target_logit = Tensor::Empty({N}, dtype);
  Result r{Tensor::Empty({N}, dtype), Tensor::Empty(logits.shape(), dtype)};
  CrossEntropyRowMax(logits, valid, row_max);
  CrossEntropyRowSumExp(logits, valid, row_max, sumexp);
  CrossEntropyTargetLogit(logits, targets, 0, valid, target_logit);
  CrossEntropyLoss(row_max, sumexp, target_logit, r.losses);
  CrossEntropyBackward(logits, targets, 0, valid, row_max, sumexp, scale,
                       r.dlogits);
  return r;
}

constexpr int64_t N = 4, V = 11;

TEST(CrossEntropyTest, LossMatchesNaiveLogSoftmax) {
  Tensor logits = Random({N, V}, 1, DType::kF64, -3, 3);
  Tensor targets = Targets({0, 10, 3, 7});
  Result r = OneShard(logits, targets, V, 1.0);
  for (int64_t i = 0; i < N; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(Get(logits, i * V + j));
    const int32_t t = targets.data<int32_t>()[i];
    EXPECT_NEAR(Get(r.losses, i), std::log(sum) - Get(logits, i * V + t),
                1e-14);
  }
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  Tensor logits = Random({N, V}, 1, DType::kF64, -3, 3);
  Tensor targets = Targets({0, 10, 3, 7});
  const double scale = 0.25;
  Result r = OneShard(logits, targets, V, scale);
  auto loss = [&] {
    Result s = OneShard(logits, targets, V, scale);
    double total = 0;
    for (int64_t i = 0; i < N; ++i) total += scale * Get(s.losses, i);
    return total;
  };
  EXPECT_LT(RelError(r.dlogits, NumericGradient(loss, logits)), 1e-8);
}

// Vocabulary 11 split as tensor parallelism does: each shard 6 columns, the
// second holding ids [6, 11) and one padding column with a huge logit that
// must not enter the loss. The cross-shard reductions are done by hand.
TEST(CrossEntropyTest, TwoShardsWithPaddingEqualOneShard) {
  const int64_t Vl = 6;
  const int64_t start[2] = {0, 6}, valid[2] = {6, 5};
  Tensor logits = Random({N, V}, 1, DType::kF64, -3, 3);
  Tensor targets = Targets({0, 10, 3, 6});
  const double scale = 0.5;
  Result whole = OneShard(logits, targets, V, scale);

  Tensor shard[2], row_max[2], sumexp[2], target_logit[2], dlogits[2];
  for (int s = 0; s < 2; ++s) {
    shard[s] = Tensor::Empty({N, Vl}, DType::kF64);
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < Vl; ++j) {
        Set(shard[s], i * Vl + j,
            j < valid[s] ? Get(logits, i * V + start[s] + j) : 1e3);
      }
    }
    row_max[s] = Tensor::Empty({N}, DType::kF64);
    sumexp[s] = Tensor::Empty({N}, DType::kF64);
    target_logit[s] = Tensor::Empty({N}, DType::kF64);
    CrossEntropyRowMax(shard[s], valid[s], row_max[s]);
  }
  Tensor max = Tensor::Empty({N}, DType::kF64);  // all-reduce MAX
  for (int64_t i = 0; i < N; ++i) {
    Set(max, i, std::max(Get(row_max[0], i), Get(row_max[1], i)));
  }
  Tensor sum = Tensor::Zeros({N}, DType::kF64);  // all-reduce SUM
  Tensor target = Tensor::Zeros({N}, DType::kF64);
  for (int s = 0; s < 2; ++s) {
    CrossEntropyRowSumExp(shard[s], valid[s], max, sumexp[s]);
    CrossEntropyTargetLogit(shard[s], targets, start[s], valid[s],
                            target_logit[s]);
    for (int64_t i = 0; i < N; ++i) {
      Set(sum, i, Get(sum, i) + Get(sumexp[s], i));
      Set(target, i, Get(target, i) + Get(target_logit[s], i));
    }
  }
  Tensor losses = Tensor::Empty({N}, DType::kF64);
  CrossEntropyLoss(max, sum, target, losses);
  EXPECT_LT(RelError(losses, whole.losses), 1e-14);

  for (int s = 0; s < 2; ++s) {
    Tensor d = shard[s];  // overwritten in place: dlogits may alias logits
    CrossEntropyBackward(shard[s], targets, start[s], valid[s], max, sum, scale,
                         d);
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < Vl; ++j) {
        const double expected =
            j < valid[s] ? Get(whole.dlogits, i * V + start[s] + j) : 0.0;
        EXPECT_NEAR(Get(d, i * Vl + j), expected, 1e-15) << s << " " << i;
      }
    }
  }
}

TEST(CrossEntropyTest, ShardWithoutValidColumnsContributesNothing) {
  Tensor logits = Random({N, 3}, 1);
  Tensor targets = Targets({0, 1, 2, 0});
  Tensor row_max = Tensor::Empty({N}, DType::kF64);
  Tensor sumexp = Tensor::Empty({N}, DType::kF64);
  Tensor target_logit = Tensor::Empty({N}, DType::kF64);
  CrossEntropyRowMax(logits, 0, row_max);
  Tensor max = Tensor::Empty({N}, DType::kF64);
  max.Fill(0.5);  // what the other shards reduce to
  CrossEntropyRowSumExp(logits, 0, max, sumexp);
  CrossEntropyTargetLogit(logits, targets, 0, 0, target_logit);
  Tensor ones = Tensor::Empty({N}, DType::kF64);
  ones.Fill(1.0);
  Tensor dlogits = Random({N, 3}, 2);
  CrossEntropyBackward(logits, targets, 0, 0, max, ones, 1.0, dlogits);
  for (int64_t i = 0; i < N; ++i) {
    EXPECT_EQ(Get(row_max, i), -INFINITY);
    EXPECT_EQ(Get(sumexp, i), 0.0);
    EXPECT_EQ(Get(target_logit, i), 0.0);
  }
  for (int64_t i = 0; i < 3 * N; ++i) EXPECT_EQ(Get(dlogits, i), 0.0);
}

// 2500 columns: several of RowSumExp's chunks, and a ragged tail.
TEST(CrossEntropyTest, Float32MatchesFloat64) {
  const int64_t wide = 2500, valid = 2497;
  Tensor logits = Random({3, wide}, 1, DType::kF64, -8, 8);
  Tensor targets = Targets({5, 2496, 1000});
  Result r64 = OneShard(logits, targets, valid, 1.0 / 3);
  Result r32 = OneShard(Cast(logits, DType::kF32), targets, valid, 1.0 / 3);
  EXPECT_LT(RelError(r32.losses, r64.losses), 1e-6);
  EXPECT_LT(RelError(r32.dlogits, r64.dlogits), 1e-6);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = valid; j < wide; ++j) {
      EXPECT_EQ(Get(r32.dlogits, i * wide + j), 0.0);
    }
  }
}

// The fused classifier equals the decomposition, each row weighed (a
// weight of 0, as an end-of-document mask gives, among them), the gradient
// written over the logits, padding columns zero; and its gradient is the
// finite-difference gradient of the weighted, scaled loss.
TEST(CrossEntropyTest, FusedEqualsTheDecomposition) {
  const int64_t wide = 2500, valid = 2497;
  const double scale = 0.3;
  Tensor logits = Random({N, wide}, 3, DType::kF64, -8, 8);
  Tensor targets = Targets({5, 2496, 1000, 0});
  Tensor weights = Tensor::Empty({N}, DType::kF32);
  const float w[N] = {1.f, 0.f, 0.5f, 2.f};
  std::copy(w, w + N, weights.data<float>());
  Result whole = OneShard(logits, targets, valid, scale);
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted);
    Tensor losses = Tensor::Empty({N}, DType::kF64);
    Tensor over = logits.Clone();  // the gradient replaces the logits
    CrossEntropyFused(over, targets, valid, weighted ? weights : Tensor(),
                      scale, losses, over);
    for (int64_t i = 0; i < N; ++i) {
      const double wi = weighted ? w[i] : 1.0;
      EXPECT_NEAR(Get(losses, i), wi * Get(whole.losses, i), 1e-13) << i;
      for (int64_t j = 0; j < wide; ++j) {
        ASSERT_NEAR(Get(over, i * wide + j),
                    wi * Get(whole.dlogits, i * wide + j), 1e-15)
            << i << " " << j;
      }
    }
    // Losses only: the logits stay as they were.
    Tensor kept = logits.Clone(), none;
    CrossEntropyFused(kept, targets, valid, Tensor(), scale, losses, none);
    EXPECT_EQ(RelError(kept, logits), 0.0);
    EXPECT_NEAR(Get(losses, 2), Get(whole.losses, 2), 1e-13);
  }
}

TEST(CrossEntropyTest, FusedGradientMatchesFiniteDifferences) {
  Tensor logits = Random({N, V}, 4, DType::kF64, -3, 3);
  Tensor targets = Targets({0, 10, 3, 7});
  Tensor weights = Tensor::Empty({N}, DType::kF32);
  const float w[N] = {1.f, 0.25f, 0.f, 3.f};
  std::copy(w, w + N, weights.data<float>());
  const double scale = 0.25;
  Tensor losses = Tensor::Empty({N}, DType::kF64);
  Tensor dlogits = Tensor::Empty({N, V}, DType::kF64);
  CrossEntropyFused(logits, targets, V, weights, scale, losses, dlogits);
  auto loss = [&] {
    Tensor l = Tensor::Empty({N}, DType::kF64), none;
    CrossEntropyFused(logits, targets, V, weights, scale, l, none);
    double total = 0;
    for (int64_t i = 0; i < N; ++i) total += scale * Get(l, i);
    return total;
  };
  EXPECT_LT(RelError(dlogits, NumericGradient(loss, logits)), 1e-8);
}

TEST(CrossEntropyDeathTest, ChecksShapes) {
  Tensor logits = Random({N, V}, 1);
  Tensor row_max = Tensor::Empty({N + 1}, DType::kF64);
  EXPECT_DEATH(CrossEntropyRowMax(logits, V, row_max), "CrossEntropyRowMax");
  Tensor ok = Tensor::Empty({N}, DType::kF64);
  EXPECT_DEATH(CrossEntropyRowMax(logits, V + 1, ok), "valid columns");
  Tensor targets = Targets({0, 1, 2, 3}), none;
  Tensor small = Tensor::Empty({N, V - 1}, DType::kF64);
  EXPECT_DEATH(CrossEntropyFused(logits, targets, V, none, 1.0, ok, small),
               "CrossEntropyFused: dlogits");
  Tensor f32 = Tensor::Empty({N}, DType::kF32);
  EXPECT_DEATH(CrossEntropyFused(logits, targets, V, none, 1.0, f32, none),
               "CrossEntropyFused");
}

}  // namespace
}  // namespace trellis
