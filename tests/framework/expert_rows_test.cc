// Moving rows to experts and back (framework/kernels/expert_rows.h): the
// route is a stable counting sort by expert, dispatch and combine do what
// their formulas say, and both backward passes match central finite
// differences.
#include "framework/kernels/expert_rows.h"

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

constexpr int64_t kTokens = 4, kTopK = 2, kExperts = 3, kWidth = 5;

// Token t's choices: (0, 2), (2, 1), (0, 1), (2, 0).
Tensor Index() {
  Tensor index = Tensor::Empty({kTokens, kTopK}, DType::kI32);
  const int32_t choices[] = {0, 2, 2, 1, 0, 1, 2, 0};
  for (int i = 0; i < kTokens * kTopK; ++i)
    index.data<int32_t>()[i] = choices[i];
  return index;
}

struct Routed {
  Tensor route = Tensor::Empty({kTokens * kTopK}, DType::kI32);
  Tensor counts = Tensor::Empty({kExperts}, DType::kI32);
};

Routed Route() {
  Routed r;
  RouteByExpert(Index(), kExperts, r.route, r.counts);
  return r;
}

TEST(ExpertRowsTest, RouteSortsSlotsByExpertKeepingSlotOrder) {
  const Routed r = Route();
  EXPECT_EQ(ExpertCounts(r.counts), (std::vector<int64_t>{3, 2, 3}));
  // Expert 0 gets slots 0, 4, 7 (rows 0-2), expert 1 slots 3, 5 (rows 3-4),
  // expert 2 slots 1, 2, 6 (rows 5-7).
  const std::vector<int32_t> want = {0, 5, 6, 3, 1, 4, 7, 2};
  const int32_t* route = r.route.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(route, route + want.size()), want);
}

TEST(ExpertRowsTest, DispatchAndCombineFollowTheRoute) {
  const Routed r = Route();
  const Tensor x = Random({kTokens, kWidth}, 1);
  Tensor perm = Tensor::Empty({kTokens * kTopK, kWidth}, DType::kF64);
  DispatchRows(x, r.route, perm);
  for (int64_t s = 0; s < kTokens * kTopK; ++s) {
    for (int64_t c = 0; c < kWidth; ++c) {
      EXPECT_EQ(Get(perm, r.route.data<int32_t>()[s] * kWidth + c),
                Get(x, (s / kTopK) * kWidth + c));
    }
  }
  const Tensor weight = Random({kTokens, kTopK}, 2);
  Tensor out = Random({kTokens, kWidth}, 3);  // overwritten
  CombineRows(perm, r.route, weight, out);
  // Each token's copies come home weighted: out = (Σ_j w_j) · x.
  for (int64_t t = 0; t < kTokens; ++t) {
    const double w = Get(weight, t * kTopK) + Get(weight, t * kTopK + 1);
    for (int64_t c = 0; c < kWidth; ++c) {
      EXPECT_NEAR(Get(out, t * kWidth + c), w * Get(x, t * kWidth + c), 1e-15);
    }
  }
}

TEST(ExpertRowsTest, BackwardPassesMatchFiniteDifferences) {
  const Routed r = Route();
  Tensor x = Random({kTokens, kWidth}, 4);
  Tensor y_perm = Random({kTokens * kTopK, kWidth}, 5);
  Tensor weight = Random({kTokens, kTopK}, 6);
  const Tensor dperm = Random({kTokens * kTopK, kWidth}, 7);
  const Tensor dout = Random({kTokens, kWidth}, 8);
  Tensor perm = Tensor::Empty({kTokens * kTopK, kWidth}, DType::kF64);
  auto dispatch = [&] {
    DispatchRows(x, r.route, perm);
    return Dot(perm, dperm);
  };
  Tensor dx = Random({kTokens, kWidth}, 9);  // overwritten
  DispatchRowsBackward(dperm, r.route, dx);
  EXPECT_LT(RelError(dx, NumericGradient(dispatch, x)), 1e-9);

  Tensor out = Tensor::Empty({kTokens, kWidth}, DType::kF64);
  auto combine = [&] {
    CombineRows(y_perm, r.route, weight, out);
    return Dot(out, dout);
  };
  Tensor dy_perm = Random({kTokens * kTopK, kWidth}, 10);
  Tensor dweight = Random({kTokens, kTopK}, 11);
  CombineRowsBackward(dout, y_perm, r.route, weight, dy_perm, dweight);
  EXPECT_LT(RelError(dy_perm, NumericGradient(combine, y_perm)), 1e-9);
  EXPECT_LT(RelError(dweight, NumericGradient(combine, weight)), 1e-9);
}

}  // namespace
}  // namespace trellis
