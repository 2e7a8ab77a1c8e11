#include "framework/kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "framework/kernels/elementwise.h"
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

// Expects a and b to hold the same bytes.
void ExpectBitwiseEqual(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

// The fused residual add + LayerNorm against Add then LayerNormForward (the
// same arithmetic, so the same bits), in float32 and float64, with sum in
// its own buffer, aliasing a (as the block does x2 += x) and aliasing b.
class AddLayerNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(AddLayerNormTest, EqualsAddThenLayerNorm) {
  const DType dtype = GetParam();
  for (const int64_t cols : {C, int64_t{64}, int64_t{1}}) {
    SCOPED_TRACE(cols);
    const Shape shape{2, 3, cols};
    // An offset mean, so that the two-pass variance matters.
    const Tensor a = Random(shape, 11, dtype, 2, 5);
    const Tensor b = Random(shape, 12, dtype);
    const Tensor w = Random({cols}, 13, dtype, 0.5, 1.5);
    const Tensor bias = Random({cols}, 14, dtype);

    Tensor ref_sum = Tensor::Empty(shape, dtype);
    Tensor ref_out = Tensor::Empty(shape, dtype);
    Tensor ref_mean = Tensor::Empty({2, 3}, dtype);
    Tensor ref_rstd = Tensor::Empty({2, 3}, dtype);
    Add(a, b, ref_sum);
    LayerNormForward(ref_sum, w, bias, ref_out, ref_mean, ref_rstd);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double exact = Get(a, i) + Get(b, i);  // then rounded to dtype
      ASSERT_EQ(Get(ref_sum, i),
                dtype == DType::kF32 ? static_cast<float>(exact) : exact)
          << i;
    }

    enum class Sum { kOwn, kAliasA, kAliasB };
    for (const Sum where : {Sum::kOwn, Sum::kAliasA, Sum::kAliasB}) {
      SCOPED_TRACE(static_cast<int>(where));
      Tensor a1 = a.Clone(), b1 = b.Clone();
      Tensor sum = where == Sum::kOwn      ? Random(shape, 15, dtype)
                   : where == Sum::kAliasA ? a1
                                           : b1;
      // Forward overwrites: outputs start as garbage.
      Tensor out = Random(shape, 16, dtype);
      Tensor mean = Random({2, 3}, 17, dtype);
      Tensor rstd = Random({2, 3}, 18, dtype);
      AddLayerNormForward(a1, b1, w, bias, sum, out, mean, rstd);
      ExpectBitwiseEqual(sum, ref_sum, "sum");
      ExpectBitwiseEqual(out, ref_out, "out");
      ExpectBitwiseEqual(mean, ref_mean, "mean");
      ExpectBitwiseEqual(rstd, ref_rstd, "rstd");
      if (where != Sum::kAliasA) ExpectBitwiseEqual(a1, a, "a unchanged");
      if (where != Sum::kAliasB) ExpectBitwiseEqual(b1, b, "b unchanged");
    }
  }
}

TEST_P(AddLayerNormTest, EmptyRowsDoNothing) {
  const DType dtype = GetParam();
  Tensor a = Tensor::Empty({0, C}, dtype), b = Tensor::Empty({0, C}, dtype);
  Tensor w = Random({C}, 1, dtype), bias = Random({C}, 2, dtype);
  Tensor out = Tensor::Empty({0, C}, dtype);
  Tensor mean = Tensor::Empty({0}, dtype), rstd = Tensor::Empty({0}, dtype);
  AddLayerNormForward(a, b, w, bias, a, out, mean, rstd);
}

INSTANTIATE_TEST_SUITE_P(DTypes, AddLayerNormTest,
                         ::testing::Values(DType::kF32, DType::kF64),
                         [](const auto& info) {
                           return info.param == DType::kF32
                                      ? std::string("F32")
                                      : std::string("F64");
                         });

TEST(AddLayerNormDeathTest, ChecksShapesDTypesAndAliasing) {
  const Tensor a = Random({N, C}, 1), b = Random({N, C}, 2);
  const Tensor w = Random({C}, 3), bias = Random({C}, 4);
  Tensor sum = Tensor::Empty({N, C}, DType::kF64);
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor mean = Tensor::Empty({N}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  const Tensor b_short = Random({N - 1, C}, 5);
  EXPECT_DEATH(AddLayerNormForward(a, b_short, w, bias, sum, out, mean, rstd),
               "AddLayerNormForward: a");
  const Tensor bias_long = Random({C + 1}, 6);
  EXPECT_DEATH(AddLayerNormForward(a, b, w, bias_long, sum, out, mean, rstd),
               "AddLayerNormForward bias");
  const Tensor b32 = Random({N, C}, 2, DType::kF32);
  EXPECT_DEATH(AddLayerNormForward(a, b32, w, bias, sum, out, mean, rstd),
               "float32");
  EXPECT_DEATH(AddLayerNormForward(a, b, w, bias, out, out, mean, rstd),
               "out would overwrite sum");
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
