#include "framework/kernels/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

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

double NaiveGelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// 300 elements: more than one 256-element chunk, and a ragged tail.
constexpr int64_t kN = 300;

TEST(GeluTest, ForwardMatchesFormula) {
  Tensor x = Random({3, kN / 3}, 1, DType::kF64, -5, 5);
  Tensor out = Tensor::Empty(x.shape(), DType::kF64);
  GeluForward(x, out);
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(Get(out, i), NaiveGelu(Get(x, i)), 1e-15);
  }
}

TEST(GeluTest, BackwardMatchesFiniteDifferences) {
  Tensor x = Random({kN}, 1, DType::kF64, -4, 4);
  Tensor g = Random({kN}, 2);
  Tensor dx = Tensor::Zeros({kN}, DType::kF64);
  GeluBackward(x, g, dx);
  auto loss = [&] {
    Tensor out = Tensor::Empty({kN}, DType::kF64);
    GeluForward(x, out);
    return Dot(out, g);
  };
  EXPECT_LT(RelError(dx, NumericGradient(loss, x)), 1e-8);

  Tensor dx1 = dx.Clone();
  GeluBackward(x, g, dx);
  EXPECT_LT(RelError(dx, Scaled(dx1, 2)), 1e-15);
}

TEST(GeluTest, Float32MatchesFloat64) {
  Tensor x = Random({kN}, 1, DType::kF64, -6, 6);
  Tensor g = Random({kN}, 2);
  Tensor out64 = Tensor::Empty({kN}, DType::kF64);
  Tensor dx64 = Tensor::Zeros({kN}, DType::kF64);
  GeluForward(x, out64);
  GeluBackward(x, g, dx64);
  Tensor x32 = Cast(x, DType::kF32), g32 = Cast(g, DType::kF32);
  Tensor out32 = Tensor::Empty({kN}, DType::kF32);
  Tensor dx32 = Tensor::Zeros({kN}, DType::kF32);
  GeluForward(x32, out32);
  GeluBackward(x32, g32, dx32);
  EXPECT_LT(RelError(out32, out64), 1e-6);
  // 1 - tanh² loses digits where tanh is near ±1.
  EXPECT_LT(RelError(dx32, dx64), 4e-6);
}

TEST(GeluTest, SaturatesWithoutOverflow) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor x = Tensor::Empty({4}, dtype);
    const double values[] = {-100.0, -20.0, 20.0, 100.0};
    for (int i = 0; i < 4; ++i) kernel_test::Set(x, i, values[i]);
    Tensor out = Tensor::Empty({4}, dtype);
    GeluForward(x, out);
    Tensor dx = Tensor::Zeros({4}, dtype), ones = Tensor::Empty({4}, dtype);
    ones.Fill(1.0);
    GeluBackward(x, ones, dx);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(Get(out, i), values[i] > 0 ? values[i] : 0.0, 1e-12);
      EXPECT_NEAR(Get(dx, i), values[i] > 0 ? 1.0 : 0.0, 1e-12);
    }
  }
}

TEST(GeluTest, ForwardMayWriteInPlace) {
  Tensor x = Random({kN}, 3, DType::kF32, -3, 3);
  Tensor out = Tensor::Empty({kN}, DType::kF32);
  GeluForward(x, out);
  GeluForward(x, x);
  EXPECT_EQ(RelError(x, out), 0);
}

}  // namespace
}  // namespace trellis
