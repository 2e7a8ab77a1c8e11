// A block's backward makes at most 15 device launches (llm.c's makes about
// 12): counted on the CPU, where each kernel counts the launches its CUDA
// twin makes (framework/launch_count.h). tests/cuda checks the same count on
// a GPU. Before the backward wrote its gradients instead of zero-filling
// and adding, fused GELU's derivative and the residual into its GEMM and
// LayerNorm, and summed all bias and LayerNorm gradients in one call, the
// count was 34 (35 with zero-bubble B and W apart).
#include "gtest/gtest.h"
#include "tests/transformer/block_launch_util.h"

namespace trellis {
namespace {

using block_launch::CountBlockBackward;

constexpr int64_t kMaxLaunches = 15;

TEST(BlockLaunchTest, DefaultScheduleBackwardMakesAtMost15Launches) {
  // 1F1B (the default): BackwardInput also forms the weight gradients.
  const int64_t launches = CountBlockBackward(
      Device::Cpu(), DType::kF32, BlockOptions{Recompute::kNone, false});
  EXPECT_LE(launches, kMaxLaunches);
  // Pinned, so that a pass that creeps back in shows: B makes the four input
  // GEMMs (GELU's derivative in the first), two LayerNorm input gradients
  // with their residuals, attention's four (the tensor-core path zero-fills
  // the dqkv it then adds to; cuDNN writes it in place, in fewer); W the
  // four weight GEMMs and one ColumnSumsMany.
  EXPECT_EQ(launches, 15);
}

TEST(BlockLaunchTest, ZeroBubbleBackwardAddsOnlyTheGradientCopy) {
  // B and W apart: B keeps a copy of dy for W.
  EXPECT_EQ(CountBlockBackward(Device::Cpu(), DType::kF32,
                               BlockOptions{Recompute::kNone, true}),
            16);
}

TEST(BlockLaunchTest, CounterSeesNothingWhenInactive) {
  // A counter counts only while it lives.
  Tensor t = Tensor::Zeros({4}, DType::kF32);
  {
    LaunchCounter counter;
    t.Zero();
    Tensor u = t.Clone();
    Add(t, u, t);
    EXPECT_EQ(counter.count(), 3);  // memset, copy, kernel
    counter.Reset();
    EXPECT_EQ(counter.count(), 0);
  }
  t.Zero();
  LaunchCounter again;
  EXPECT_EQ(again.count(), 0);
}

}  // namespace
}  // namespace trellis
