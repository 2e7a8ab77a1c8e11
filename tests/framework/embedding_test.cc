#include "framework/kernels/embedding.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;
using kernel_test::Scaled;

constexpr int64_t C = 5;

Tensor Ids(const std::vector<int32_t>& values, Shape shape) {
  Tensor ids = Tensor::Empty(std::move(shape), DType::kI32);
  for (size_t i = 0; i < values.size(); ++i) ids.data<int32_t>()[i] = values[i];
  return ids;
}

// A shard holding rows [4, 8) of a 10-row table; ids outside give zero rows.
TEST(EmbeddingTest, ForwardLooksUpLocalRowsAndZerosTheRest) {
  const int64_t vocab_start = 4;
  Tensor table = Random({4, C}, 1);
  Tensor ids = Ids({4, 0, 7, 9, 5, 4}, {2, 3});
  Tensor out = Random({2, 3, C}, 2);  // garbage to be overwritten
  EmbeddingForward(ids, table, vocab_start, out);
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t row = ids.data<int32_t>()[i] - vocab_start;
    for (int64_t c = 0; c < C; ++c) {
      const double expected =
          row >= 0 && row < 4 ? Get(table, row * C + c) : 0.0;
      EXPECT_EQ(Get(out, i * C + c), expected);
    }
  }
}

TEST(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  const int64_t vocab_start = 4;
  Tensor table = Random({4, C}, 1);
  Tensor ids = Ids({4, 0, 7, 9, 5, 4}, {6});  // id 4 twice: sums
  Tensor g = Random({6, C}, 3);
  Tensor dtable = Tensor::Zeros({4, C}, DType::kF64);
  EmbeddingBackwardWeight(ids, g, vocab_start, dtable);
  auto loss = [&] {
    Tensor out = Tensor::Empty({6, C}, DType::kF64);
    EmbeddingForward(ids, table, vocab_start, out);
    return Dot(out, g);
  };
  EXPECT_LT(RelError(dtable, NumericGradient(loss, table)), 1e-9);
  EXPECT_EQ(Get(dtable, 2 * C), 0.0);  // id 6 never appears

  Tensor dtable1 = dtable.Clone();
  EmbeddingBackwardWeight(ids, g, vocab_start, dtable);
  EXPECT_LT(RelError(dtable, Scaled(dtable1, 2)), 1e-15);
}

TEST(EmbeddingTest, PositionEmbeddingAndItsBackward) {
  const int64_t B = 2, T = 3, T_max = 4;
  Tensor wpe = Random({T_max, C}, 1);
  Tensor x = Random({B, T, C}, 2), x0 = x.Clone();
  AddPositionEmbedding(wpe, x);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (b * T + t) * C + c;
        EXPECT_EQ(Get(x, i), Get(x0, i) + Get(wpe, t * C + c));
      }
    }
  }
  Tensor g = Random({B, T, C}, 3);
  Tensor dwpe = Tensor::Zeros({T_max, C}, DType::kF64);
  PositionEmbeddingBackwardWeight(g, dwpe);
  auto loss = [&] {
    Tensor y = x0.Clone();
    AddPositionEmbedding(wpe, y);
    return Dot(y, g);
  };
  EXPECT_LT(RelError(dwpe, NumericGradient(loss, wpe)), 1e-9);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(Get(dwpe, 3 * C + c), 0.0);

  Tensor dwpe1 = dwpe.Clone();
  PositionEmbeddingBackwardWeight(g, dwpe);
  EXPECT_LT(RelError(dwpe, Scaled(dwpe1, 2)), 1e-15);
}

TEST(EmbeddingTest, Float32) {
  Tensor table = Random({3, C}, 1, DType::kF32);
  Tensor ids = Ids({2, 1}, {2});
  Tensor out = Tensor::Empty({2, C}, DType::kF32);
  EmbeddingForward(ids, table, 0, out);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(out.data<float>()[c], table.data<float>()[2 * C + c]);
    EXPECT_EQ(out.data<float>()[C + c], table.data<float>()[C + c]);
  }
}

TEST(EmbeddingDeathTest, ChecksShapes) {
  Tensor table = Random({3, C}, 1);
  Tensor ids = Ids({0, 1}, {2});
  Tensor out = Tensor::Empty({3, C}, DType::kF64);
  EXPECT_DEATH(EmbeddingForward(ids, table, 0, out), "EmbeddingForward");
  Tensor wpe = Random({2, C}, 2);
  Tensor x = Random({1, 3, C}, 3);  // T = 3 > T_max = 2
  EXPECT_DEATH(AddPositionEmbedding(wpe, x), "AddPositionEmbedding");
}

}  // namespace
}  // namespace trellis
