#include "framework/kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Cast;
using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;
using kernel_test::Scaled;

constexpr int64_t N = 5, C = 11;  // C not a multiple of the vector lanes

struct LayerNormCase {
  Tensor x = Random({N, C}, 1, DType::kF64, -2, 2);
  Tensor w = Random({C}, 2, DType::kF64, 0.5, 1.5);
  Tensor b = Random({C}, 3);
  Tensor g = Random({N, C}, 4);  // upstream gradient

  // sum(LayerNorm(x) ⊙ g).
  double Loss() {
    Tensor out = Tensor::Empty({N, C}, DType::kF64);
    Tensor mean = Tensor::Empty({N}, DType::kF64);
    Tensor rstd = Tensor::Empty({N}, DType::kF64);
    LayerNormForward(x, w, b, out, mean, rstd);
    return Dot(out, g);
  }
};

TEST(LayerNormTest, ForwardMatchesNaive) {
  LayerNormCase c;
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor mean = Tensor::Empty({N}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  LayerNormForward(c.x, c.w, c.b, out, mean, rstd);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) m += Get(c.x, i * C + j) / C;
    for (int64_t j = 0; j < C; ++j) {
      var += std::pow(Get(c.x, i * C + j) - m, 2) / C;
    }
    const double s = 1 / std::sqrt(var + kLayerNormEps);
    EXPECT_NEAR(Get(mean, i), m, 1e-14);
    EXPECT_NEAR(Get(rstd, i), s, 1e-12);
    for (int64_t j = 0; j < C; ++j) {
      const double expected =
          (Get(c.x, i * C + j) - m) * s * Get(c.w, j) + Get(c.b, j);
      EXPECT_NEAR(Get(out, i * C + j), expected, 1e-13);
    }
  }
}

TEST(LayerNormTest, BackwardMatchesFiniteDifferences) {
  LayerNormCase c;
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor mean = Tensor::Empty({N}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  LayerNormForward(c.x, c.w, c.b, out, mean, rstd);
  Tensor dx = Tensor::Zeros({N, C}, DType::kF64);
  Tensor dw = Tensor::Zeros({C}, DType::kF64);
  Tensor db = Tensor::Zeros({C}, DType::kF64);
  LayerNormBackwardInput(c.g, c.x, c.w, mean, rstd, dx);
  LayerNormBackwardWeight(c.g, c.x, mean, rstd, dw, db);

  auto loss = [&] { return c.Loss(); };
  EXPECT_LT(RelError(dx, NumericGradient(loss, c.x)), 1e-7);
  EXPECT_LT(RelError(dw, NumericGradient(loss, c.w)), 1e-7);
  EXPECT_LT(RelError(db, NumericGradient(loss, c.b)), 1e-7);

  // A second call adds the same gradients again.
  Tensor dx1 = dx.Clone(), dw1 = dw.Clone(), db1 = db.Clone();
  LayerNormBackwardInput(c.g, c.x, c.w, mean, rstd, dx);
  LayerNormBackwardWeight(c.g, c.x, mean, rstd, dw, db);
  EXPECT_LT(RelError(dx, Scaled(dx1, 2)), 1e-15);
  EXPECT_LT(RelError(dw, Scaled(dw1, 2)), 1e-15);
  EXPECT_LT(RelError(db, Scaled(db1, 2)), 1e-15);
}

TEST(LayerNormTest, Float32MatchesFloat64) {
  LayerNormCase c;
  auto run = [&](DType dtype, Tensor& out, Tensor& dx, Tensor& dw) {
    Tensor x = Cast(c.x, dtype), w = Cast(c.w, dtype), b = Cast(c.b, dtype);
    Tensor g = Cast(c.g, dtype);
    out = Tensor::Empty({N, C}, dtype);
    Tensor mean = Tensor::Empty({N}, dtype), rstd = Tensor::Empty({N}, dtype);
    LayerNormForward(x, w, b, out, mean, rstd);
    dx = Tensor::Zeros({N, C}, dtype);
    dw = Tensor::Zeros({C}, dtype);
    Tensor db = Tensor::Zeros({C}, dtype);
    LayerNormBackwardInput(g, x, w, mean, rstd, dx);
    LayerNormBackwardWeight(g, x, mean, rstd, dw, db);
  };
  Tensor out32, dx32, dw32, out64, dx64, dw64;
  run(DType::kF32, out32, dx32, dw32);
  run(DType::kF64, out64, dx64, dw64);
  EXPECT_LT(RelError(out32, out64), 1e-6);
  EXPECT_LT(RelError(dx32, dx64), 1e-5);
  EXPECT_LT(RelError(dw32, dw64), 1e-6);
}

TEST(LayerNormTest, Accepts3DRows) {
  Tensor x = Random({2, 3, C}, 5);
  Tensor w = Random({C}, 6), b = Random({C}, 7);
  Tensor out = Tensor::Empty({2, 3, C}, DType::kF64);
  Tensor mean = Tensor::Empty({2, 3}, DType::kF64);
  Tensor rstd = Tensor::Empty({2, 3}, DType::kF64);
  LayerNormForward(x, w, b, out, mean, rstd);
  Tensor out2 = Tensor::Empty({6, C}, DType::kF64);
  Tensor mean2 = Tensor::Empty({6}, DType::kF64);
  Tensor rstd2 = Tensor::Empty({6}, DType::kF64);
  LayerNormForward(x.View({6, C}), w, b, out2, mean2, rstd2);
  EXPECT_EQ(RelError(out, out2), 0);
}

TEST(LayerNormDeathTest, ChecksShapes) {
  Tensor x = Random({N, C}, 1), w = Random({C + 1}, 2), b = Random({C + 1}, 3);
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor mean = Tensor::Empty({N}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  EXPECT_DEATH(LayerNormForward(x, w, b, out, mean, rstd), "LayerNormForward");
  Tensor w32 = Random({C}, 2, DType::kF32), b32 = Random({C}, 3, DType::kF32);
  EXPECT_DEATH(LayerNormForward(x, w32, b32, out, mean, rstd), "float32");
}

}  // namespace
}  // namespace trellis
