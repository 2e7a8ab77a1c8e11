// CUDA causal attention (flash-style: row log-sum-exps saved, no T×T
// matrix) against the CPU kernel, which stores the probabilities, at
// sequence lengths up to 2048 and head widths 32 to 128.
//
// Tolerances (max |gpu - cpu| / max |cpu| per tensor):
//   float32: output and dqkv 1e-4 (float32 throughout; the online softmax
//     and the CPU's blocked, polynomial-exp softmax sum in other orders);
//   bfloat16: output 1e-2, dqkv 2e-2 (outputs rounded to 8 significant
//     bits; backward also reads the rounded output for dO·O);
//   row log-sum-exps, in float32 for both: 1e-5 of max(1, |lse|) against a
//     float64 reference on the same (rounded) inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/kernels/attention.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::Random;
using cuda_test::Rounded;
using cuda_test::ToDevice;
using cuda_test::ToHost;
using cuda_test::Tolerance;

struct Case {
  int64_t B, T, H, D;
};

// log Σ_{j <= t} exp(q_t · k_j / sqrt(D)) for one (b, h, t), in float64.
double ReferenceLse(const Tensor& qkv, const Case& c, int64_t b, int64_t h,
                    int64_t t) {
  const float* x = qkv.data<float>();
  const int64_t C = c.H * c.D;
  const float* q = x + (b * c.T + t) * 3 * C + h * c.D;
  std::vector<double> s(t + 1);
  for (int64_t j = 0; j <= t; ++j) {
    const float* k = x + (b * c.T + j) * 3 * C + C + h * c.D;
    double dot = 0;
    for (int64_t d = 0; d < c.D; ++d) dot += double{q[d]} * k[d];
    s[j] = dot / std::sqrt(static_cast<double>(c.D));
  }
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double v : s) sum += std::exp(v - m);
  return m + std::log(sum);
}

class CudaAttentionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }
  DType dtype() const { return GetParam(); }

  void Check(const Case& c) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T
                                    << " H=" << c.H << " D=" << c.D);
    const int64_t C = c.H * c.D;
    const Tensor qkv = Rounded(Random({c.B, c.T, 3 * C}, 1, -2, 2), dtype());
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kF32);
    Tensor probs = Tensor::Empty(
        AttentionSavedShape(Device::Cpu(), c.B, c.T, c.H), DType::kF32);
    AttentionForward(qkv, c.H, out, probs);

    const Tensor d_qkv = ToDevice(qkv, dtype());
    Tensor d_out = Tensor::Empty({c.B, c.T, C}, dtype(), Gpu());
    const Shape lse_shape = AttentionSavedShape(Gpu(), c.B, c.T, c.H);
    ASSERT_EQ(lse_shape, (Shape{c.B, c.H, c.T}));
    Tensor d_lse = Tensor::Empty(lse_shape, DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, d_out, d_lse);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-4, 1e-2), "out");

    const Tensor lse = d_lse.To(Device::Cpu());
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t t = 0; t < c.T; t += std::max<int64_t>(1, c.T / 17)) {
          const double expected = ReferenceLse(qkv, c, b, h, t);
          EXPECT_NEAR(lse.data<float>()[(b * c.H + h) * c.T + t], expected,
                      1e-5 * std::max(1.0, std::abs(expected)))
              << "row " << t << " of head " << h;
        }
      }
    }

    // Backward accumulates onto a nonzero dqkv.
    const Tensor dout = Rounded(Random({c.B, c.T, C}, 2), dtype());
    Tensor dqkv = Rounded(Random(qkv.shape(), 3), dtype());
    Tensor d_dqkv = ToDevice(dqkv, dtype());
    AttentionBackward(dout, qkv, out, probs, c.H, dqkv);
    const Tensor d_dout = ToDevice(dout, dtype());
    AttentionBackward(d_dout, d_qkv, d_out, d_lse, c.H, d_dqkv);
    ExpectClose(d_dqkv, dqkv, Tolerance(dtype(), 1e-4, 2e-2), "dqkv");

    // Both passes repeat to the bit.
    Tensor again = Tensor::Empty(d_out.shape(), dtype(), Gpu());
    Tensor lse_again = Tensor::Empty(lse_shape, DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, again, lse_again);
    Tensor dqkv_again =
        ToDevice(Rounded(Random(qkv.shape(), 3), dtype()), dtype());
    AttentionBackward(d_dout, d_qkv, again, lse_again, c.H, dqkv_again);
    const Tensor a = ToHost(d_out), b = ToHost(again);
    const Tensor g1 = ToHost(d_dqkv), g2 = ToHost(dqkv_again);
    for (int64_t i = 0; i < a.numel(); ++i) {
      ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
    }
    for (int64_t i = 0; i < g1.numel(); ++i) {
      ASSERT_EQ(g1.data<float>()[i], g2.data<float>()[i]) << i;
    }
  }
};

TEST_P(CudaAttentionTest, LongSequences) {
  Check({1, 1024, 2, 64});
  Check({1, 2048, 2, 64});
}

TEST_P(CudaAttentionTest, HeadWidthsAndRaggedTiles) {
  Check({2, 77, 3, 32});   // T not a multiple of any tile
  Check({3, 100, 2, 48});  // D padded up to 64
  Check({1, 200, 1, 128});
  Check({2, 1, 4, 64});  // one token: the output is v
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaAttentionTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
