// LaunchCounter on the CPU: each public kernel counts the launches its CUDA
// twin makes, calls nested inside another kernel count nothing, and memsets
// and copies count one each.
#include "framework/launch_count.h"

#include <gtest/gtest.h>

#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/matmul.h"
#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Random;

TEST(LaunchCountTest, KernelsCountTheirCudaTwinsLaunches) {
  const Tensor x = Random({4, 3}, 1, DType::kF32);
  const Tensor w = Random({3, 5}, 2, DType::kF32);
  const Tensor b = Random({5}, 3, DType::kF32);
  Tensor pre = Tensor::Empty({4, 5}, DType::kF32);
  Tensor out = Tensor::Empty({4, 5}, DType::kF32);
  Tensor dw = Tensor::Zeros({3, 5}, DType::kF32);
  Tensor db = Tensor::Zeros({5}, DType::kF32);
  LaunchCounter counter;
  const auto launches = [&counter] {
    const int64_t n = counter.count();
    counter.Reset();
    return n;
  };
  MatmulForward(x, w, b, out);
  EXPECT_EQ(launches(), 1);
  // Its CPU path calls MatmulForward and GeluForward; CUDA fuses them.
  MatmulForwardGelu(x, w, b, pre, out);
  EXPECT_EQ(launches(), 1);
  MatmulBackwardWeight(out, x, dw, db);  // GEMM, then the bias add
  EXPECT_EQ(launches(), 2);
  Tensor no_bias;
  MatmulBackwardWeight(out, x, dw, no_bias);
  EXPECT_EQ(launches(), 1);
  BiasBackward(out, db);  // two-pass column sums
  EXPECT_EQ(launches(), 2);
  SumOfSquares(std::vector<const Tensor*>{&x, &w, &b});  // 3 partials, 1 sum
  EXPECT_EQ(launches(), 4);
  pre.Zero();
  out.CopyFrom(pre);
  EXPECT_EQ(launches(), 2);
}

TEST(LaunchCountTest, AdamWStepManyIsOneLaunchPer256Tensors) {
  std::vector<Tensor> t;
  for (int i = 0; i < 4 * 300; ++i) {
    t.push_back(Tensor::Zeros({2}, DType::kF32));
  }
  std::vector<AdamWTensors> entries;
  for (int i = 0; i < 300; ++i) {
    entries.push_back(
        {&t[4 * i], &t[4 * i + 1], &t[4 * i + 2], &t[4 * i + 3], 0.0, nullptr});
  }
  LaunchCounter counter;
  AdamWStepMany(AdamWHyper{}, entries);
  EXPECT_EQ(counter.count(), 2);
}

TEST(LaunchCountDeathTest, OneCounterAtATime) {
  LaunchCounter counter;
  EXPECT_DEATH(LaunchCounter second, "already active");
}

}  // namespace
}  // namespace trellis
