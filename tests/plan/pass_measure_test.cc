// The measured pass times: every pass takes time, a backward costs more
// than its forward (twice the GEMMs), and the split W is not the empty W
// that follows a fused backward. Prints the figures for the validation
// test's model.
#include "tools/plan/pass_measure.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace trellis {
namespace {

TEST(PassMeasureTest, TimesEveryPassOfBothBackwards) {
  TrainOptions o;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.seq_len = 64;
  o.model.vocab_size = 257;
  for (int64_t mbs : {2, 4}) {
    o.micro_batch_size = mbs;
    const PassTimes t = MeasurePassTimes(o, 9);
    std::printf(
        "mbs %lld: F %.3f ms, fused backward %.3f ms, split B %.3f + W %.3f "
        "ms: split / fused %.3f\n",
        static_cast<long long>(mbs), t.forward * 1e3, t.fused_backward * 1e3,
        t.split_input * 1e3, t.split_weight * 1e3, t.SplitRatio());
    EXPECT_GT(t.forward, 0);
    EXPECT_GT(t.fused_backward, t.forward);
    EXPECT_GT(t.split_input, 0);
    // W holds the four weight GEMMs, about a third of the backward's work.
    EXPECT_GT(t.split_weight, 0.2 * t.fused_backward);
    EXPECT_LT(t.split_weight, t.fused_backward);
  }
}

}  // namespace
}  // namespace trellis
