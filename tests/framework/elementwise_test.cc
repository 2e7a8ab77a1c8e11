#include "framework/kernels/elementwise.h"

#include <gtest/gtest.h>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Get;
using kernel_test::Random;

class ElementwiseTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  double tol() const { return dtype() == DType::kF32 ? 1e-6 : 1e-15; }
};

TEST_P(ElementwiseTest, AddAxpyScale) {
  Tensor a = Random({3, 7}, 1, dtype()), b = Random({3, 7}, 2, dtype());
  Tensor a0 = a.Clone();
  Tensor out = Tensor::Empty({3, 7}, dtype());
  Add(a, b, out);
  for (int64_t i = 0; i < 21; ++i) {
    EXPECT_NEAR(Get(out, i), Get(a, i) + Get(b, i), tol());
  }
  Add(a, b, a);  // out may alias an input
  for (int64_t i = 0; i < 21; ++i) EXPECT_EQ(Get(a, i), Get(out, i));

  Tensor y = a0.Clone();
  Axpy(-0.5, b, y);
  for (int64_t i = 0; i < 21; ++i) {
    EXPECT_NEAR(Get(y, i), Get(a0, i) - 0.5 * Get(b, i), tol());
  }
  Scale(y, 3.0);
  for (int64_t i = 0; i < 21; ++i) {
    EXPECT_NEAR(Get(y, i), 3 * (Get(a0, i) - 0.5 * Get(b, i)), 4 * tol());
  }
}

TEST_P(ElementwiseTest, BiasAndItsBackward) {
  Tensor bias = Random({5}, 1, dtype());
  Tensor out = Random({2, 3, 5}, 2, dtype()), out0 = out.Clone();
  AddBias(bias, out);
  for (int64_t i = 0; i < 30; ++i) {
    EXPECT_NEAR(Get(out, i), Get(out0, i) + Get(bias, i % 5), tol());
  }
  Tensor dbias = Random({5}, 3, dtype()), dbias0 = dbias.Clone();
  BiasBackward(out0, dbias);  // accumulates column sums
  for (int64_t j = 0; j < 5; ++j) {
    double sum = Get(dbias0, j);
    for (int64_t i = 0; i < 6; ++i) sum += Get(out0, i * 5 + j);
    EXPECT_NEAR(Get(dbias, j), sum, 8 * tol());
  }
}

TEST_P(ElementwiseTest, Reductions) {
  Tensor x = Random({37}, 4, dtype());  // not a multiple of the lanes
  double sum = 0, squares = 0;
  for (int64_t i = 0; i < 37; ++i) {
    sum += Get(x, i);
    squares += Get(x, i) * Get(x, i);
  }
  EXPECT_NEAR(Sum(x), sum, 1e-13);
  EXPECT_NEAR(SumOfSquares(x), squares, 1e-13);
  EXPECT_EQ(Sum(Tensor::Empty({0}, dtype())), 0.0);
}

TEST_P(ElementwiseTest, SumOfSquaresOverManyTensorsAddsThemInOrder) {
  const Tensor a = Random({37}, 5, dtype());
  const Tensor b = Random({3, 4}, 6, dtype());
  const Tensor none = Tensor::Empty({0}, dtype());
  EXPECT_EQ(SumOfSquares(std::vector<const Tensor*>{&a, &none, &b}),
            SumOfSquares(a) + 0.0 + SumOfSquares(b));
  EXPECT_EQ(SumOfSquares(std::vector<const Tensor*>{}), 0.0);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ElementwiseTest,
                         ::testing::Values(DType::kF32, DType::kF64),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST(ElementwiseDeathTest, ChecksShapesAndDTypes) {
  Tensor a = Random({3}, 1), b = Random({4}, 2);
  Tensor out = Tensor::Empty({3}, DType::kF64);
  EXPECT_DEATH(Add(a, b, out), "Add");
  Tensor c = Random({3}, 3, DType::kF32);
  EXPECT_DEATH(Axpy(1.0, c, a), "float32");
  Tensor ints = Tensor::Zeros({3}, DType::kI32);
  EXPECT_DEATH(Scale(ints, 2.0), "int32");
}

}  // namespace
}  // namespace trellis
