// The float array math behind softmax, cross-entropy and GELU.
#include "framework/kernels/cpu_common.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace trellis::kernels_internal {
namespace {

// Each instruction set this CPU runs, so every code path is checked.
std::vector<Simd> SimdLevels() {
  std::vector<Simd> levels = {Simd::kNone};
  if (BestSimd() != Simd::kNone) levels.push_back(Simd::kSse2);
  if (BestSimd() == Simd::kAvx2Fma) levels.push_back(Simd::kAvx2Fma);
  return levels;
}

std::string SimdName(const ::testing::TestParamInfo<Simd>& info) {
  switch (info.param) {
    case Simd::kNone:
      return "Libm";
    case Simd::kSse2:
      return "Sse2";
    case Simd::kAvx2Fma:
      return "Avx2Fma";
  }
  return "?";
}

class CpuMathTest : public ::testing::TestWithParam<Simd> {
 protected:
  Simd simd() const { return GetParam(); }
  // libm flushes nothing to zero below the polynomial's range.
  bool flushes() const { return simd() != Simd::kNone; }
};

std::vector<float> Uniform(int64_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Every length from 0 to 40 covers the 8- and 4-lane bodies and their tails.
TEST_P(CpuMathTest, ExpShiftSumIsAccurate) {
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<float> x = Uniform(n, -90.0f, 3.0f, n), y(n);
    const float shift = -1.5f;
    const float sum = ExpShiftSum(x.data(), shift, n, y.data(), simd());
    double expected_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(static_cast<double>(x[i]) - shift);
      if (flushes() && x[i] - shift < -87.3f) {
        EXPECT_EQ(y[i], 0.0f);  // below the range: flushed to zero
      } else {
        EXPECT_NEAR(y[i], e, 4e-7 * e) << x[i];
      }
      expected_sum += y[i];
    }
    EXPECT_NEAR(sum, expected_sum, 1e-6 * expected_sum + 1e-30);
  }
}

TEST_P(CpuMathTest, ExpCoversTheFloatRange) {
  std::vector<float> x;
  for (double v = -87.0; v < 88.0; v += 0.01) x.push_back(v);
  std::vector<float> y(x.size());
  ExpShiftScale(x.data(), 0.0f, 1.0f, x.size(), y.data(), simd());
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i], e, 4e-7 * e) << x[i];
  }
}

TEST_P(CpuMathTest, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1000.0f, 0.0f, 1000.0f, nan};
  std::vector<float> y(x.size());
  ExpShiftScale(x.data(), 0.0f, 2.0f, x.size(), y.data(), simd());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_GT(y[3], 1e38f);         // exp(88), or inf from libm
  EXPECT_TRUE(std::isnan(y[4]));  // NaN is not hidden
}

TEST_P(CpuMathTest, TanhIsAccurateInPlace) {
  std::vector<float> x = Uniform(1001, -12.0f, 12.0f, 7), y = x;
  TanhArray(y.data(), y.size(), y.data(), simd());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(y[i], std::tanh(static_cast<double>(x[i])), 3e-7) << x[i];
  }
  std::vector<float> big = {-100.0f, 100.0f};
  TanhArray(big.data(), 2, big.data(), simd());
  EXPECT_EQ(big[0], -1.0f);
  EXPECT_EQ(big[1], 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Simd, CpuMathTest, ::testing::ValuesIn(SimdLevels()),
                         SimdName);

TEST(CpuReductionTest, LaneReductionsMatchPlainLoops) {
  for (int64_t n : {0, 1, 7, 8, 9, 37}) {
    std::vector<double> x(n), y(n);
    double sum = 0, dot = 0, max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = std::sin(i + 1.0);
      y[i] = std::cos(i + 2.0);
      sum += x[i];
      dot += x[i] * y[i];
      max = std::max(max, x[i]);
    }
    EXPECT_NEAR(SumLanes<double>(x.data(), n), sum, 1e-14);
    EXPECT_NEAR(DotLanes<double>(x.data(), y.data(), n), dot, 1e-14);
    EXPECT_EQ(MaxLanes(x.data(), n), max);
  }
}

}  // namespace
}  // namespace trellis::kernels_internal
