#include "framework/kernels/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

// F = 300 spans two of the kernel's 256-column chunks, the second ragged.
constexpr int64_t B = 2, T = 3, F = 300;

double Silu(double g) { return g / (1 + std::exp(-g)); }

TEST(SwiGluTest, ForwardMatchesNaive) {
  const Tensor gate_up = Random({B, T, 2 * F}, 1, DType::kF64, -6, 6);
  Tensor out = Random({B, T, F}, 2);  // forward overwrites
  SwiGluForward(gate_up, out);
  for (int64_t n = 0; n < B * T; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = Get(gate_up, n * 2 * F + f);
      const double u = Get(gate_up, n * 2 * F + F + f);
      ASSERT_NEAR(Get(out, n * F + f), Silu(g) * u, 1e-14) << n << " " << f;
    }
  }
}

// The gate half is columns [0, F) and the up half [F, 2F) of each row:
// swapping the halves changes the result.
TEST(SwiGluTest, GateIsTheFirstColumnBlock) {
  Tensor gate_up = Tensor::Zeros({1, 4}, DType::kF64);
  gate_up.data<double>()[0] = 2.0;  // gate 0
  gate_up.data<double>()[3] = 5.0;  // up 1
  Tensor out = Tensor::Empty({1, 2}, DType::kF64);
  SwiGluForward(gate_up, out);
  EXPECT_EQ(Get(out, 0), 0.0);      // up 0 is zero
  EXPECT_EQ(Get(out, 1), 0.0);      // silu(gate 1 = 0) is zero
  gate_up.data<double>()[2] = 3.0;  // up 0
  SwiGluForward(gate_up, out);
  EXPECT_NEAR(Get(out, 0), Silu(2.0) * 3.0, 1e-15);
}

TEST(SwiGluTest, BackwardMatchesFiniteDifferences) {
  Tensor gate_up = Random({B, T, 2 * F}, 1, DType::kF64, -4, 4);
  const Tensor g = Random({B, T, F}, 2);
  Tensor dgate_up = Tensor::Zeros(gate_up.shape(), DType::kF64);
  SwiGluBackward(gate_up, g, dgate_up);
  auto loss = [&] {
    Tensor out = Tensor::Empty({B, T, F}, DType::kF64);
    SwiGluForward(gate_up, out);
    return Dot(out, g);
  };
  EXPECT_LT(RelError(dgate_up, NumericGradient(loss, gate_up)), 1e-8);

  // Accumulates: a second call doubles it.
  const Tensor once = dgate_up.Clone();
  SwiGluBackward(gate_up, g, dgate_up);
  EXPECT_LT(RelError(dgate_up, Scaled(once, 2)), 1e-15);

  // The write variant overwrites whatever was there with the same numbers.
  Tensor written = Random(gate_up.shape(), 3);
  SwiGluBackwardWrite(gate_up, g, written);
  EXPECT_EQ(std::memcmp(written.raw(), once.raw(), once.nbytes()), 0);
}

// Large |gate| saturates the sigmoid without NaN or Inf in float32.
TEST(SwiGluTest, SaturatesCleanly) {
  Tensor gate_up = Tensor::Empty({1, 6}, DType::kF32);
  const float values[6] = {-200.f, 0.f, 200.f, 1.f, 1.f, 1.f};
  std::memcpy(gate_up.raw(), values, sizeof(values));
  Tensor out = Tensor::Empty({1, 3}, DType::kF32);
  SwiGluForward(gate_up, out);
  EXPECT_NEAR(Get(out, 0), 0.0, 1e-30);
  EXPECT_EQ(Get(out, 1), 0.0);
  EXPECT_EQ(Get(out, 2), 200.0);
  Tensor d = Tensor::Empty({1, 6}, DType::kF32);
  Tensor ones = Tensor::Empty({1, 3}, DType::kF32);
  for (int i = 0; i < 3; ++i) ones.data<float>()[i] = 1.f;
  SwiGluBackwardWrite(gate_up, ones, d);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isfinite(Get(d, i))) << i;
  EXPECT_NEAR(Get(d, 0), 0.0, 1e-30);
  EXPECT_EQ(Get(d, 2), 1.0);
  EXPECT_EQ(Get(d, 4), 0.0);  // d up = silu(0)
}

TEST(SwiGluTest, Float32MatchesFloat64) {
  const Tensor gate_up = Random({B, T, 2 * F}, 1, DType::kF64, -6, 6);
  const Tensor g = Random({B, T, F}, 2);
  Tensor out64 = Tensor::Empty({B, T, F}, DType::kF64);
  Tensor out32 = Tensor::Empty({B, T, F}, DType::kF32);
  SwiGluForward(gate_up, out64);
  const Tensor gate_up32 = Cast(gate_up, DType::kF32);
  SwiGluForward(gate_up32, out32);
  EXPECT_LT(RelError(out32, out64), 1e-6);
  Tensor d64 = Tensor::Empty(gate_up.shape(), DType::kF64);
  Tensor d32 = Tensor::Empty(gate_up.shape(), DType::kF32);
  SwiGluBackwardWrite(gate_up, g, d64);
  SwiGluBackwardWrite(gate_up32, Cast(g, DType::kF32), d32);
  EXPECT_LT(RelError(d32, d64), 1e-6);
}

TEST(SwiGluDeathTest, ChecksShapesAndAliasing) {
  Tensor odd = Random({2, 5}, 1);
  Tensor out = Tensor::Empty({2, 2}, DType::kF64);
  EXPECT_DEATH(SwiGluForward(odd, out), "gate \\| up");
  Tensor gate_up = Random({2, 6}, 1);
  Tensor wrong = Tensor::Empty({2, 2}, DType::kF64);
  EXPECT_DEATH(SwiGluForward(gate_up, wrong), "expected");
  Tensor dout = Random({2, 3}, 2);
  EXPECT_DEATH(SwiGluBackwardWrite(gate_up, dout, gate_up), "aliases");
}

}  // namespace
}  // namespace trellis
