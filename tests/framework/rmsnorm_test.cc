#include "framework/kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "framework/kernels/elementwise.h"
#include "framework/launch_count.h"
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
constexpr double kEps = 1e-5;

struct RmsNormCase {
  Tensor x = Random({N, C}, 1, DType::kF64, -2, 2);
  Tensor w = Random({C}, 2, DType::kF64, 0.5, 1.5);
  Tensor g = Random({N, C}, 4);  // upstream gradient

  // sum(RmsNorm(x) ⊙ g).
  double Loss() {
    Tensor out = Tensor::Empty({N, C}, DType::kF64);
    Tensor rstd = Tensor::Empty({N}, DType::kF64);
    RmsNormForward(x, w, kEps, out, rstd);
    return Dot(out, g);
  }
};

TEST(RmsNormTest, ForwardMatchesNaive) {
  RmsNormCase c;
  Tensor out = Random({N, C}, 9);  // forward overwrites
  Tensor rstd = Random({N}, 10);
  RmsNormForward(c.x, c.w, kEps, out, rstd);
  for (int64_t i = 0; i < N; ++i) {
    double mean_square = 0;
    for (int64_t j = 0; j < C; ++j) {
      mean_square += Get(c.x, i * C + j) * Get(c.x, i * C + j) / C;
    }
    const double s = 1 / std::sqrt(mean_square + kEps);
    EXPECT_NEAR(Get(rstd, i), s, 1e-13);
    for (int64_t j = 0; j < C; ++j) {
      EXPECT_NEAR(Get(out, i * C + j), Get(c.x, i * C + j) * s * Get(c.w, j),
                  1e-13);
    }
  }
}

// eps is the caller's: a zero row normalizes to zeros with rstd 1/sqrt(eps).
TEST(RmsNormTest, UsesTheGivenEps) {
  Tensor x = Tensor::Zeros({1, C}, DType::kF64);
  Tensor w = Random({C}, 2);
  Tensor out = Tensor::Empty({1, C}, DType::kF64);
  Tensor rstd = Tensor::Empty({1}, DType::kF64);
  RmsNormForward(x, w, 1e-6, out, rstd);
  EXPECT_NEAR(Get(rstd, 0), 1e3, 1e-9);
  RmsNormForward(x, w, 1e-4, out, rstd);
  EXPECT_NEAR(Get(rstd, 0), 1e2, 1e-10);
}

TEST(RmsNormTest, BackwardMatchesFiniteDifferences) {
  RmsNormCase c;
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  RmsNormForward(c.x, c.w, kEps, out, rstd);
  Tensor dx = Tensor::Zeros({N, C}, DType::kF64);
  Tensor dw = Tensor::Zeros({C}, DType::kF64);
  RmsNormBackwardInput(c.g, c.x, c.w, rstd, dx);
  RmsNormBackwardWeight(c.g, c.x, rstd, dw);

  auto loss = [&] { return c.Loss(); };
  EXPECT_LT(RelError(dx, NumericGradient(loss, c.x)), 1e-8);
  EXPECT_LT(RelError(dw, NumericGradient(loss, c.w)), 1e-8);

  // A second call adds the same gradients again.
  Tensor dx1 = dx.Clone(), dw1 = dw.Clone();
  RmsNormBackwardInput(c.g, c.x, c.w, rstd, dx);
  RmsNormBackwardWeight(c.g, c.x, rstd, dw);
  EXPECT_LT(RelError(dx, Scaled(dx1, 2)), 1e-15);
  EXPECT_LT(RelError(dw, Scaled(dw1, 2)), 1e-15);
}

// residual + dL/dx, overwriting whatever dx held; also with residual
// aliasing dx (the block's case).
TEST(RmsNormTest, BackwardInputResidualOverwrites) {
  RmsNormCase c;
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  RmsNormForward(c.x, c.w, kEps, out, rstd);
  const Tensor residual = Random({N, C}, 7);
  Tensor expected = residual.Clone();
  RmsNormBackwardInput(c.g, c.x, c.w, rstd, expected);

  Tensor dx = Random({N, C}, 8);  // garbage
  RmsNormBackwardInputResidual(c.g, c.x, c.w, rstd, residual, dx);
  EXPECT_EQ(std::memcmp(dx.raw(), expected.raw(), dx.nbytes()), 0);
  Tensor in_place = residual.Clone();
  RmsNormBackwardInputResidual(c.g, c.x, c.w, rstd, in_place, in_place);
  EXPECT_EQ(std::memcmp(in_place.raw(), expected.raw(), dx.nbytes()), 0);
}

TEST(RmsNormTest, Float32MatchesFloat64) {
  RmsNormCase c;
  auto run = [&](DType dtype, Tensor& out, Tensor& dx, Tensor& dw) {
    Tensor x = Cast(c.x, dtype), w = Cast(c.w, dtype), g = Cast(c.g, dtype);
    out = Tensor::Empty({N, C}, dtype);
    Tensor rstd = Tensor::Empty({N}, dtype);
    RmsNormForward(x, w, kEps, out, rstd);
    dx = Tensor::Zeros({N, C}, dtype);
    dw = Tensor::Zeros({C}, dtype);
    RmsNormBackwardInput(g, x, w, rstd, dx);
    RmsNormBackwardWeight(g, x, rstd, dw);
  };
  Tensor out32, dx32, dw32, out64, dx64, dw64;
  run(DType::kF32, out32, dx32, dw32);
  run(DType::kF64, out64, dx64, dw64);
  EXPECT_LT(RelError(out32, out64), 1e-6);
  EXPECT_LT(RelError(dx32, dx64), 1e-5);
  EXPECT_LT(RelError(dw32, dw64), 1e-6);
}

// Expects a and b to hold the same bytes.
void ExpectBitwiseEqual(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

// The fused residual add + RMSNorm against Add then RmsNormForward, bit for
// bit, with sum in its own buffer and aliasing a or b.
class AddRmsNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(AddRmsNormTest, EqualsAddThenRmsNorm) {
  const DType dtype = GetParam();
  for (const int64_t cols : {C, int64_t{64}, int64_t{1}}) {
    SCOPED_TRACE(cols);
    const Shape shape{2, 3, cols};
    const Tensor a = Random(shape, 11, dtype, -3, 3);
    const Tensor b = Random(shape, 12, dtype);
    const Tensor w = Random({cols}, 13, dtype, 0.5, 1.5);
    Tensor ref_sum = Tensor::Empty(shape, dtype);
    Tensor ref_out = Tensor::Empty(shape, dtype);
    Tensor ref_rstd = Tensor::Empty({2, 3}, dtype);
    Add(a, b, ref_sum);
    RmsNormForward(ref_sum, w, kEps, ref_out, ref_rstd);

    enum class Sum { kOwn, kAliasA, kAliasB };
    for (const Sum where : {Sum::kOwn, Sum::kAliasA, Sum::kAliasB}) {
      SCOPED_TRACE(static_cast<int>(where));
      Tensor a1 = a.Clone(), b1 = b.Clone();
      Tensor sum = where == Sum::kOwn      ? Random(shape, 15, dtype)
                   : where == Sum::kAliasA ? a1
                                           : b1;
      Tensor out = Random(shape, 16, dtype);
      Tensor rstd = Random({2, 3}, 18, dtype);
      AddRmsNormForward(a1, b1, w, kEps, sum, out, rstd);
      ExpectBitwiseEqual(sum, ref_sum, "sum");
      ExpectBitwiseEqual(out, ref_out, "out");
      ExpectBitwiseEqual(rstd, ref_rstd, "rstd");
      if (where != Sum::kAliasA) ExpectBitwiseEqual(a1, a, "a unchanged");
      if (where != Sum::kAliasB) ExpectBitwiseEqual(b1, b, "b unchanged");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AddRmsNormTest,
                         ::testing::Values(DType::kF32, DType::kF64),
                         [](const auto& info) {
                           return info.param == DType::kF32
                                      ? std::string("F32")
                                      : std::string("F64");
                         });

// The CPU kernels count the launches of their CUDA twins: one each, two for
// the weight gradient's column sums.
TEST(RmsNormTest, CountsModeledLaunches) {
  RmsNormCase c;
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  Tensor dx = Tensor::Zeros({N, C}, DType::kF64);
  Tensor dw = Tensor::Zeros({C}, DType::kF64);
  LaunchCounter counter;
  RmsNormForward(c.x, c.w, kEps, out, rstd);
  EXPECT_EQ(counter.count(), 1);
  RmsNormBackwardInput(c.g, c.x, c.w, rstd, dx);
  EXPECT_EQ(counter.count(), 2);
  RmsNormBackwardWeight(c.g, c.x, rstd, dw);
  EXPECT_EQ(counter.count(), 4);
}

TEST(RmsNormDeathTest, ChecksShapesAndAliasing) {
  Tensor x = Random({N, C}, 1), w = Random({C + 1}, 2);
  Tensor out = Tensor::Empty({N, C}, DType::kF64);
  Tensor rstd = Tensor::Empty({N}, DType::kF64);
  EXPECT_DEATH(RmsNormForward(x, w, kEps, out, rstd), "RmsNormForward");
  Tensor w32 = Random({C}, 2, DType::kF32);
  EXPECT_DEATH(RmsNormForward(x, w32, kEps, out, rstd), "float32");
  Tensor w_ok = Random({C}, 2);
  Tensor rstd_short = Tensor::Empty({N - 1}, DType::kF64);
  EXPECT_DEATH(RmsNormForward(x, w_ok, kEps, out, rstd_short), "rstd");
  EXPECT_DEATH(RmsNormForward(x, w_ok, -1.0, out, rstd), "eps");
  Tensor g = Random({N, C}, 3);
  EXPECT_DEATH(RmsNormBackwardInputResidual(g, x, w_ok, rstd, x, g), "aliases");
}

}  // namespace
}  // namespace trellis
