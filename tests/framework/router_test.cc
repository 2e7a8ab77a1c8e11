// The router's kernels (framework/kernels/router.h): top-k with ties to the
// lower expert, the selection bias that moves choices but not weights, the
// balance losses against their formulas, and both backward passes against
// central finite differences for softmax and sigmoid scores, normalized or
// not.
#include "framework/kernels/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "framework/kernels/expert_rows.h"
#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;

constexpr int64_t kRows = 6, kExperts = 5, kTopK = 2;

Tensor Choices() { return Tensor::Empty({kRows, kTopK}, DType::kI32); }

std::vector<double> Softmax(const Tensor& logits, int64_t row) {
  std::vector<double> p(logits.dim(1));
  double sum = 0;
  for (size_t e = 0; e < p.size(); ++e) {
    p[e] = std::exp(Get(logits, row * logits.dim(1) + e));
    sum += p[e];
  }
  for (double& v : p) v /= sum;
  return p;
}

TEST(RouterTest, TopKTakesTheLargestScoresTiesToTheLowerExpert) {
  // Row 0: experts 1 and 3 tie for first, 0 and 4 for third.
  Tensor logits = Tensor::Empty({1, kExperts}, DType::kF64);
  const double row[] = {0.5, 2.0, -1.0, 2.0, 0.5};
  for (int e = 0; e < kExperts; ++e) logits.data<double>()[e] = row[e];
  for (const int64_t k : {1, 2, 3}) {
    Tensor index = Tensor::Empty({1, k}, DType::kI32);
    Tensor weight = Tensor::Empty({1, k}, DType::kF64);
    RouterTopK(logits, Tensor(), {.top_k = k, .normalize = false}, index,
               weight);
    const int32_t want[] = {1, 3, 0};
    const std::vector<double> p = Softmax(logits, 0);
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(index.data<int32_t>()[j], want[j]) << "k " << k;
      EXPECT_NEAR(weight.data<double>()[j], p[want[j]], 1e-15);
    }
  }
}

TEST(RouterTest, NormalizedSoftmaxIsTheSoftmaxOverTheChosenLogits) {
  const Tensor logits = Random({kRows, kExperts}, 1, DType::kF64, -2, 2);
  Tensor index = Choices(), weight = Random({kRows, kTopK}, 2);
  RouterTopK(logits, Tensor(), {.top_k = kTopK}, index, weight);
  for (int64_t t = 0; t < kRows; ++t) {
    const int32_t* idx = index.data<int32_t>() + t * kTopK;
    const double a = Get(logits, t * kExperts + idx[0]);
    const double b = Get(logits, t * kExperts + idx[1]);
    EXPECT_GE(a, b);
    EXPECT_NEAR(Get(weight, t * kTopK), 1 / (1 + std::exp(b - a)), 1e-14);
    EXPECT_NEAR(Get(weight, t * kTopK + 1), 1 / (1 + std::exp(a - b)), 1e-14);
  }
}

TEST(RouterTest, SelectionBiasMovesTheChoiceNotTheWeight) {
  const Tensor logits = Random({kRows, kExperts}, 3, DType::kF64, -1, 1);
  // A bias far above the scores' range forces experts 4 and 2.
  Tensor bias = Tensor::Zeros({kExperts}, DType::kF64);
  bias.data<double>()[4] = 10;
  bias.data<double>()[2] = 5;
  Tensor index = Choices(), weight = Tensor::Empty({kRows, kTopK}, DType::kF64);
  const RouterSpec spec{
      .top_k = kTopK, .score = RouterScore::kSigmoid, .normalize = false};
  RouterTopK(logits, bias, spec, index, weight);
  for (int64_t t = 0; t < kRows; ++t) {
    EXPECT_EQ(index.data<int32_t>()[t * kTopK], 4);
    EXPECT_EQ(index.data<int32_t>()[t * kTopK + 1], 2);
    const double l = Get(logits, t * kExperts + 4);
    EXPECT_NEAR(Get(weight, t * kTopK), 1 / (1 + std::exp(-l)), 1e-15);
  }
}

TEST(RouterTest, LossesMatchTheirFormulas) {
  const Tensor logits = Random({kRows, kExperts}, 4, DType::kF64, -2, 2);
  Tensor index = Choices(), weight = Tensor::Empty({kRows, kTopK}, DType::kF64);
  const RouterSpec spec{.top_k = kTopK};
  RouterTopK(logits, Tensor(), spec, index, weight);
  Tensor route = Tensor::Empty({kRows * kTopK}, DType::kI32);
  Tensor counts = Tensor::Empty({kExperts}, DType::kI32);
  RouteByExpert(index, kExperts, route, counts);
  Tensor losses = Tensor::Empty({2}, DType::kF64);
  RouterLosses(logits, counts, spec, losses);
  double aux = 0, z = 0;
  std::vector<double> mean_p(kExperts, 0.0);
  for (int64_t t = 0; t < kRows; ++t) {
    const std::vector<double> p = Softmax(logits, t);
    double sum = 0;
    for (int64_t e = 0; e < kExperts; ++e) {
      mean_p[e] += p[e] / kRows;
      sum += std::exp(Get(logits, t * kExperts + e));
    }
    z += std::log(sum) * std::log(sum) / kRows;
  }
  for (int64_t e = 0; e < kExperts; ++e) {
    aux += kExperts * counts.data<int32_t>()[e] / double(kRows * kTopK) *
           mean_p[e];
  }
  EXPECT_NEAR(Get(losses, 0), aux, 1e-14);
  EXPECT_NEAR(Get(losses, 1), z, 1e-14);
  // Perfect balance scores 1 (each f_e = P_e = 1/E).
  Tensor flat = Tensor::Zeros({kExperts, kExperts}, DType::kF64);
  Tensor even = Tensor::Empty({kExperts}, DType::kI32);
  for (int64_t e = 0; e < kExperts; ++e) even.data<int32_t>()[e] = 1;
  RouterLosses(flat, even, {.top_k = 1}, losses);
  EXPECT_NEAR(Get(losses, 0), 1.0, 1e-15);
}

// (sigmoid scores, normalized weights)
class RouterGradientTest
    : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  RouterSpec Spec() const {
    return {.top_k = kTopK,
            .score = std::get<0>(GetParam()) ? RouterScore::kSigmoid
                                             : RouterScore::kSoftmax,
            .normalize = std::get<1>(GetParam())};
  }
};

TEST_P(RouterGradientTest, TopKBackwardMatchesFiniteDifferences) {
  Tensor logits = Random({kRows, kExperts}, 5, DType::kF64, -2, 2);
  const Tensor dweight = Random({kRows, kTopK}, 6);
  Tensor index = Choices(), weight = Tensor::Empty({kRows, kTopK}, DType::kF64);
  auto loss = [&] {
    RouterTopK(logits, Tensor(), Spec(), index, weight);
    return Dot(weight, dweight);
  };
  loss();
  Tensor dlogits = Random({kRows, kExperts}, 7);  // overwritten
  RouterTopKBackward(logits, index, weight, dweight, Spec(), dlogits);
  EXPECT_LT(RelError(dlogits, NumericGradient(loss, logits)), 1e-8);
}

TEST_P(RouterGradientTest, LossesBackwardMatchesFiniteDifferences) {
  Tensor logits = Random({kRows, kExperts}, 8, DType::kF64, -2, 2);
  Tensor index = Choices(), weight = Tensor::Empty({kRows, kTopK}, DType::kF64);
  RouterTopK(logits, Tensor(), Spec(), index, weight);
  Tensor route = Tensor::Empty({kRows * kTopK}, DType::kI32);
  Tensor counts = Tensor::Empty({kExperts}, DType::kI32);
  RouteByExpert(index, kExperts, route, counts);
  // The counts are held fixed (not differentiated), as in training.
  const double aux_scale = 0.3, z_scale = 0.05;
  Tensor losses = Tensor::Empty({2}, DType::kF64);
  auto loss = [&] {
    RouterLosses(logits, counts, Spec(), losses);
    return aux_scale * Get(losses, 0) + z_scale * Get(losses, 1);
  };
  const Tensor before = Random({kRows, kExperts}, 9);
  Tensor dlogits = before.Clone();  // accumulated into
  RouterLossesBackward(logits, counts, Spec(), aux_scale, z_scale, dlogits);
  Tensor added = dlogits.Clone();
  for (int64_t i = 0; i < added.numel(); ++i) {
    added.data<double>()[i] -= Get(before, i);
  }
  EXPECT_LT(RelError(added, NumericGradient(loss, logits)), 1e-8);
}

INSTANTIATE_TEST_SUITE_P(
    Scores, RouterGradientTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
      return std::string(std::get<0>(info.param) ? "Sigmoid" : "Softmax") +
             (std::get<1>(info.param) ? "Normalized" : "Raw");
    });

}  // namespace
}  // namespace trellis
