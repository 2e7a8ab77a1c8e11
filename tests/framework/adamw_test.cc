#include "framework/kernels/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Get;
using kernel_test::Set;

// Two steps on two parameters, checked against values worked out by hand
// from the formulas in adamw.h:
//   step 1, element 0: g = 0.5·0.5 = 0.25; m = 0.1·0.25 = 0.025;
//     v = 0.05·0.0625 = 0.003125; m̂ = 0.025/0.1 = 0.25;
//     v̂ = 0.003125/0.05 = 0.0625, sqrt 0.25; update = 1 (eps aside);
//     p = 1 - 0.1·(1 + 0.1·1) = 0.89.
//   step 2, element 0: g = 0.5·(-0.5) = -0.25;
//     m = 0.9·0.025 - 0.025 = -0.0025; v = 0.95·0.003125 + 0.003125
//     = 0.00609375; m̂ = -0.0025/0.19; v̂ = 0.00609375/0.0975 = 0.0625;
//     update = (-0.0025/0.19)/0.25 = -1/19;
//     p = 0.89 - 0.1·(-1/19 + 0.089).
// Element 1 starts at -2 with gradients 0.2 and 0.2: its m̂ and v̂ make the
// update exactly 1 at both steps: p = -2 - 0.1·(1 - 0.2) = -2.08, then
// p = -2.08 - 0.1·(1 - 0.208).
template <typename T>
void CheckTwoSteps(DType dtype, double tolerance) {
  AdamWHyper hyper;
  hyper.lr = 0.1;
  hyper.beta1 = 0.9;
  hyper.beta2 = 0.95;
  hyper.eps = 1e-8;
  hyper.weight_decay = 0.1;
  hyper.grad_scale = 0.5;
  Tensor param = Tensor::Empty({2}, dtype), grad = Tensor::Empty({2}, dtype);
  Tensor m = Tensor::Zeros({2}, dtype), v = Tensor::Zeros({2}, dtype);
  Set(param, 0, 1.0);
  Set(param, 1, -2.0);

  Set(grad, 0, 0.5);
  Set(grad, 1, 0.4);
  hyper.step = 1;
  AdamWStep(hyper, grad, param, m, v);
  EXPECT_NEAR(Get(m, 0), 0.025, tolerance);
  EXPECT_NEAR(Get(v, 0), 0.003125, tolerance);
  // eps enters as 0.1·1e-8/(0.25 + 1e-8)·... ≈ 4e-9 on element 0.
  EXPECT_NEAR(Get(param, 0), 0.89, 1e-8 + tolerance);
  EXPECT_NEAR(Get(param, 1), -2.08, 1e-8 + tolerance);

  Set(grad, 0, -0.5);
  Set(grad, 1, 0.4);
  hyper.step = 2;
  AdamWStep(hyper, grad, param, m, v);
  EXPECT_NEAR(Get(m, 0), -0.0025, tolerance);
  EXPECT_NEAR(Get(v, 0), 0.00609375, tolerance);
  EXPECT_NEAR(Get(param, 0), 0.89 - 0.1 * (-1.0 / 19.0 + 0.089),
              1e-8 + tolerance);
  EXPECT_NEAR(Get(param, 1), -2.08 - 0.1 * (1 - 0.208), 1e-8 + tolerance);
}

TEST(AdamWTest, TwoStepsMatchHandComputedValuesInFloat64) {
  CheckTwoSteps<double>(DType::kF64, 1e-15);
}

TEST(AdamWTest, TwoStepsMatchHandComputedValuesInFloat32) {
  CheckTwoSteps<float>(DType::kF32, 1e-6);
}

// A generic element, against a plain scalar transcription of the formula.
TEST(AdamWTest, ManyElementsMatchScalarFormula) {
  const int64_t n = 37;
  Tensor param = kernel_test::Random({n}, 1),
         grad = kernel_test::Random({n}, 2);
  Tensor m = kernel_test::Random({n}, 3, DType::kF64, -0.1, 0.1);
  Tensor v = kernel_test::Random({n}, 4, DType::kF64, 0.0, 0.01);
  Tensor p0 = param.Clone(), m0 = m.Clone(), v0 = v.Clone();
  AdamWHyper hyper;
  hyper.weight_decay = 0.1;
  hyper.step = 7;
  hyper.grad_scale = 0.3;
  AdamWStep(hyper, grad, param, m, v);
  for (int64_t i = 0; i < n; ++i) {
    const double g = 0.3 * Get(grad, i);
    const double mi = 0.9 * Get(m0, i) + 0.1 * g;
    const double vi = 0.95 * Get(v0, i) + 0.05 * g * g;
    const double mhat = mi / (1 - std::pow(0.9, 7));
    const double vhat = vi / (1 - std::pow(0.95, 7));
    const double p = Get(p0, i) - hyper.lr * (mhat / (std::sqrt(vhat) + 1e-8) +
                                              0.1 * Get(p0, i));
    EXPECT_NEAR(Get(m, i), mi, 1e-15);
    EXPECT_NEAR(Get(v, i), vi, 1e-15);
    EXPECT_NEAR(Get(param, i), p, 1e-14);
  }
}

TEST(AdamWDeathTest, ChecksStepAndDTypes) {
  Tensor p = Tensor::Zeros({3}, DType::kF32),
         g = Tensor::Zeros({3}, DType::kF32);
  Tensor m = Tensor::Zeros({3}, DType::kF32),
         v = Tensor::Zeros({3}, DType::kF32);
  AdamWHyper hyper;
  hyper.step = 0;
  EXPECT_DEATH(AdamWStep(hyper, g, p, m, v), "steps count from 1");
  hyper.step = 1;
  Tensor v64 = Tensor::Zeros({3}, DType::kF64);
  EXPECT_DEATH(AdamWStep(hyper, g, p, m, v64), "float64");
}

}  // namespace
}  // namespace trellis
