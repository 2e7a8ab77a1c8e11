// Scaling a kernel cost table to a profiled step: each kernel class's rates
// by the table's predicted time for that step over the measured one, and
// nothing for a class the step did not run; and to measured passes, the
// compute grids by one factor.
#include "tools/plan/kernel_cost_calibrate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tools/plan/stage_facts.h"

namespace trellis {
namespace {

RateGrid Flat(double rate) {
  RateGrid g;
  g.axes = {std::vector<double>{1}, {1}, {1}};
  g.rates = {rate};
  return g;
}

KernelCosts FlatTable() {
  KernelCosts k;
  k.peak_flops = k.memory_bandwidth = 1e30;
  k.gemm_forward = k.gemm_backward_input = k.gemm_backward_weight = Flat(1e11);
  k.attention = Flat(5e10);
  k.elementwise = Flat(2e10);
  k.adamw = Flat(1e10);
  return k;
}

TrainOptions Step() {
  TrainOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.seq_len = 64;
  o.model.vocab_size = 256;
  o.micro_batch_size = 2;
  o.global_batch_size = 4;
  o.dp = o.tp = o.pp = 1;
  return o;
}

TEST(KernelCostCalibrateTest, ScalesEachClassToTheStep) {
  const TrainOptions o = Step();
  // The step's GEMM FLOPs at 1e11, so that a kernel time twice that is a
  // factor of one half.
  const double rows = 128, micro = 2;
  const double gemm_flops =
      micro * 3 * 2 * rows *
      (2.0 * static_cast<double>(BlockGemmElements(o)) + 256.0 * 128);
  const double gemm_ms = 2 * gemm_flops / 1e11 * 1e3;
  KernelCosts k = FlatTable();
  const StepCalibration s =
      CalibrateToStep(o,
                      {{"MatmulForward", 10, gemm_ms / 2},
                       {"MatmulBackwardWeight", 10, gemm_ms / 2},
                       {"LayerNormForward", 4, 1.0}},
                      k);
  EXPECT_NEAR(s.gemm_predicted, gemm_flops / 1e11, 1e-12);
  EXPECT_NEAR(s.gemm, 0.5, 1e-9);
  EXPECT_NEAR(k.gemm_forward.rates[0], 5e10, 1);
  EXPECT_NEAR(k.gemm_backward_weight.rates[0], 5e10, 1);
  // No attention or AdamW kernel in the list: those rates stay.
  EXPECT_EQ(s.attention, 1);
  EXPECT_EQ(k.attention.rates[0], 5e10);
  EXPECT_EQ(k.adamw.rates[0], 1e10);
  EXPECT_EQ(k.elementwise.rates[0], 2e10);
  EXPECT_THAT(k.source, ::testing::HasSubstr("GEMMs x0.500"));
}

TEST(KernelCostCalibrateTest, FactorsAreClamped) {
  KernelCosts k = FlatTable();
  const StepCalibration s =
      CalibrateToStep(Step(), {{"MatmulForward", 1, 1e9}}, k);
  EXPECT_EQ(s.gemm, 0.25);
}

TEST(KernelCostCalibrateTest, PassesScaleTheComputeGridsByOneFactor) {
  KernelCosts once = FlatTable(), twice = FlatTable();
  PassTimes passes;
  passes.forward = 0.002;
  passes.fused_backward = 0.004;
  const double f = CalibrateToPasses(Step(), passes, once);
  passes.forward *= 2;
  passes.fused_backward *= 2;
  // Passes twice as slow: rates half as fast, whatever the table said.
  const double g = CalibrateToPasses(Step(), passes, twice);
  ASSERT_GT(f, 0.25);
  ASSERT_LT(f, 4);
  EXPECT_NEAR(g, f / 2, 1e-12);
  EXPECT_NEAR(twice.gemm_forward.rates[0], 1e11 * g, 1e-3);
  EXPECT_NEAR(twice.attention.rates[0], 5e10 * g, 1e-3);
  EXPECT_NEAR(twice.elementwise.rates[0], 2e10 * g, 1e-3);
  EXPECT_EQ(twice.adamw.rates[0], 1e10);  // not in a block's passes
}

}  // namespace
}  // namespace trellis
