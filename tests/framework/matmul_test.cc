#include "framework/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
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

constexpr int64_t B = 2, T = 3, K = 5, M = 7;

Shape WeightShape(WeightLayout layout) {
  return layout == WeightLayout::kInOut ? Shape{K, M} : Shape{M, K};
}

// w[k, m] of the logical (K, M) weight, whatever its layout.
double WeightAt(const Tensor& w, WeightLayout layout, int64_t k, int64_t m) {
  return layout == WeightLayout::kInOut ? Get(w, k * M + m) : Get(w, m * K + k);
}

class MatmulTest : public ::testing::TestWithParam<WeightLayout> {
 protected:
  WeightLayout layout() const { return GetParam(); }
  Tensor x_ = Random({B, T, K}, 1);
  Tensor w_ = Random(WeightShape(GetParam()), 2);
  Tensor bias_ = Random({M}, 3);
  Tensor g_ = Random({B, T, M}, 4);

  Tensor Forward(bool with_bias) {
    Tensor out = Tensor::Empty({B, T, M}, DType::kF64);
    MatmulForward(x_, w_, with_bias ? bias_ : Tensor(), out, layout());
    return out;
  }
};

TEST_P(MatmulTest, ForwardMatchesNaive) {
  for (bool with_bias : {false, true}) {
    Tensor out = Forward(with_bias);
    for (int64_t n = 0; n < B * T; ++n) {
      for (int64_t m = 0; m < M; ++m) {
        double expected = with_bias ? Get(bias_, m) : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          expected += Get(x_, n * K + k) * WeightAt(w_, layout(), k, m);
        }
        EXPECT_NEAR(Get(out, n * M + m), expected, 1e-14);
      }
    }
  }
}

TEST_P(MatmulTest, BackwardMatchesFiniteDifferences) {
  Tensor dx = Tensor::Zeros({B, T, K}, DType::kF64);
  Tensor dw = Tensor::Zeros(WeightShape(layout()), DType::kF64);
  Tensor dbias = Tensor::Zeros({M}, DType::kF64);
  MatmulBackwardInput(g_, w_, dx, layout());
  MatmulBackwardWeight(g_, x_, dw, dbias, layout());

  auto loss = [&] { return Dot(Forward(/*with_bias=*/true), g_); };
  EXPECT_LT(RelError(dx, NumericGradient(loss, x_)), 1e-8);
  EXPECT_LT(RelError(dw, NumericGradient(loss, w_)), 1e-8);
  EXPECT_LT(RelError(dbias, NumericGradient(loss, bias_)), 1e-8);

  // Backward accumulates; an undefined dbias is skipped.
  Tensor dx1 = dx.Clone(), dw1 = dw.Clone(), dbias1 = dbias.Clone();
  MatmulBackwardInput(g_, w_, dx, layout());
  MatmulBackwardWeight(g_, x_, dw, dbias, layout());
  EXPECT_LT(RelError(dx, Scaled(dx1, 2)), 1e-15);
  EXPECT_LT(RelError(dw, Scaled(dw1, 2)), 1e-15);
  EXPECT_LT(RelError(dbias, Scaled(dbias1, 2)), 1e-15);
  Tensor no_bias;
  MatmulBackwardWeight(g_, x_, dw, no_bias, layout());
  EXPECT_LT(RelError(dw, Scaled(dw1, 3)), 1e-15);
}

TEST_P(MatmulTest, Float32MatchesFloat64) {
  Tensor x = Cast(x_, DType::kF32), w = Cast(w_, DType::kF32);
  Tensor bias = Cast(bias_, DType::kF32), g = Cast(g_, DType::kF32);
  Tensor out = Tensor::Empty({B, T, M}, DType::kF32);
  MatmulForward(x, w, bias, out, layout());
  EXPECT_LT(RelError(out, Forward(true)), 1e-6);

  Tensor dx = Tensor::Zeros({B, T, K}, DType::kF32);
  Tensor dw = Tensor::Zeros(WeightShape(layout()), DType::kF32);
  Tensor dbias = Tensor::Zeros({M}, DType::kF32);
  MatmulBackwardInput(g, w, dx, layout());
  MatmulBackwardWeight(g, x, dw, dbias, layout());
  Tensor dx64 = Tensor::Zeros({B, T, K}, DType::kF64);
  Tensor dw64 = Tensor::Zeros(WeightShape(layout()), DType::kF64);
  Tensor dbias64 = Tensor::Zeros({M}, DType::kF64);
  MatmulBackwardInput(g_, w_, dx64, layout());
  MatmulBackwardWeight(g_, x_, dw64, dbias64, layout());
  EXPECT_LT(RelError(dx, dx64), 1e-6);
  EXPECT_LT(RelError(dw, dw64), 1e-6);
  EXPECT_LT(RelError(dbias, dbias64), 1e-6);
}

// The fused dense + GELU against MatmulForward then GeluForward: the same
// calls on the CPU, so the same bits, in float32 and float64, with and
// without bias. The outputs start as garbage (forward overwrites).
TEST_P(MatmulTest, ForwardGeluEqualsMatmulThenGelu) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << DTypeName(dtype) << (with_bias ? " bias" : " no bias"));
      const Tensor x = Cast(x_, dtype), w = Cast(w_, dtype);
      const Tensor bias = with_bias ? Cast(bias_, dtype) : Tensor();
      Tensor ref_pre = Tensor::Empty({B, T, M}, dtype);
      Tensor ref_out = Tensor::Empty({B, T, M}, dtype);
      MatmulForward(x, w, bias, ref_pre, layout());
      GeluForward(ref_pre, ref_out);

      Tensor pre = Random({B, T, M}, 5, dtype);
      Tensor out = Random({B, T, M}, 6, dtype);
      MatmulForwardGelu(x, w, bias, pre, out, layout());
      EXPECT_EQ(std::memcmp(pre.raw(), ref_pre.raw(), pre.nbytes()), 0);
      EXPECT_EQ(std::memcmp(out.raw(), ref_out.raw(), out.nbytes()), 0);
      // And against the formula, so that a wrong pair cannot agree with
      // itself.
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double v = Get(pre, i);
        const double gelu =
            0.5 * v *
            (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        EXPECT_NEAR(Get(out, i), gelu, dtype == DType::kF32 ? 1e-6 : 1e-14)
            << i;
      }
      EXPECT_LT(RelError(pre, Forward(with_bias)),
                dtype == DType::kF32 ? 1e-6 : 1e-15);
    }
  }
}

// The dense layer with its residual: MatmulForward then Add on the CPU, bit
// for bit, and the formula (residual + x @ w + bias) to 1e-15 in float64.
TEST_P(MatmulTest, ForwardResidualEqualsMatmulThenAdd) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << DTypeName(dtype) << (with_bias ? " bias" : " no bias"));
      const Tensor x = Cast(x_, dtype), w = Cast(w_, dtype);
      const Tensor bias = with_bias ? Cast(bias_, dtype) : Tensor();
      const Tensor residual = Random({B, T, M}, 7, dtype);
      Tensor ref = Tensor::Empty({B, T, M}, dtype);
      MatmulForward(x, w, bias, ref, layout());
      Add(ref, residual, ref);

      Tensor out = Random({B, T, M}, 8, dtype);
      MatmulForwardResidual(x, w, bias, residual, out, layout());
      EXPECT_EQ(std::memcmp(out.raw(), ref.raw(), out.nbytes()), 0);
      if (dtype != DType::kF64) continue;
      const Tensor dense = Forward(with_bias);
      for (int64_t i = 0; i < out.numel(); ++i) {
        EXPECT_NEAR(Get(out, i), Get(residual, i) + Get(dense, i), 1e-12) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, MatmulTest,
                         ::testing::Values(WeightLayout::kInOut,
                                           WeightLayout::kOutIn),
                         [](const auto& info) {
                           return info.param == WeightLayout::kInOut
                                      ? std::string("InOut")
                                      : std::string("OutIn");
                         });

TEST(MatmulEdgeTest, EmptyInnerDimensionGivesBias) {
  Tensor x = Tensor::Empty({4, 0}, DType::kF64);
  Tensor w = Tensor::Empty({0, 3}, DType::kF64);
  Tensor bias = Random({3}, 1);
  Tensor out = Random({4, 3}, 2);
  MatmulForward(x, w, bias, out);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(Get(out, i), Get(bias, i % 3));
  MatmulForward(x, w, Tensor(), out);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(Get(out, i), 0.0);
}

TEST(MatmulDeathTest, ChecksShapes) {
  Tensor x = Random({4, K}, 1), w = Random({K, M}, 2);
  Tensor out = Tensor::Empty({4, M + 1}, DType::kF64);
  EXPECT_DEATH(MatmulForward(x, w, Tensor(), out), "MatmulForward");
  Tensor out_ok = Tensor::Empty({4, M}, DType::kF64);
  EXPECT_DEATH(MatmulForward(x, w, Tensor(), out_ok, WeightLayout::kOutIn),
               "out, in");
}

TEST(MatmulDeathTest, ForwardGeluChecksShapesAndAliasing) {
  const Tensor x = Random({4, K}, 1), w = Random({K, M}, 2);
  Tensor pre = Tensor::Empty({4, M}, DType::kF64);
  Tensor out = Tensor::Empty({4, M}, DType::kF64);
  Tensor wide = Tensor::Empty({4, M + 1}, DType::kF64);
  EXPECT_DEATH(MatmulForwardGelu(x, w, Tensor(), wide, out),
               "MatmulForwardGelu");
  EXPECT_DEATH(MatmulForwardGelu(x, w, Tensor(), pre, wide),
               "MatmulForwardGelu");
  Tensor out32 = Tensor::Empty({4, M}, DType::kF32);
  EXPECT_DEATH(MatmulForwardGelu(x, w, Tensor(), pre, out32), "float32");
  EXPECT_DEATH(MatmulForwardGelu(x, w, Tensor(), pre, pre),
               "out would overwrite pre_gelu");
}

TEST(MatmulDeathTest, ForwardResidualChecksShapesAndAliasing) {
  const Tensor x = Random({4, K}, 1), w = Random({K, M}, 2);
  Tensor residual = Random({4, M}, 3);
  Tensor out = Tensor::Empty({4, M}, DType::kF64);
  const Tensor wide = Random({4, M + 1}, 4);
  EXPECT_DEATH(MatmulForwardResidual(x, w, Tensor(), wide, out),
               "MatmulForwardResidual: residual");
  EXPECT_DEATH(MatmulForwardResidual(x, w, Tensor(), residual, residual),
               "out would overwrite the residual");
}

}  // namespace
}  // namespace trellis
