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
//
// CudaAttentionTest asks for the mma path (AttentionPath::kMma): bfloat16
// calls with head width 32, 64 or 128 take the tensor-core kernels on GPUs
// of compute capability 8.0 or newer, the rest the float32 SIMT kernels
// (AttentionPath::kSimt takes every call there). The cuDNN path has its own
// suite (cuda_attention_cudnn_test.cc). CudaAttentionMmaTest runs both on the
// same inputs and compares each with the CPU and with each other. It checks the
// gradients from zero, one third of dqkv (dQ, dK, dV) at a time, so that each
// is measured against its own scale. Tolerances (max |a - b| / max |b|):
//   output 1e-2 (P is rounded to bfloat16 before P·V, relative 2^-9, and
//     the output to bfloat16);
//   dQ, dK, dV 2e-2 each (P and dS rounded to bfloat16 before the products,
//     dO·O read from the rounded output, gradients rounded to bfloat16);
//   row log-sum-exps 1e-5 of max(1, |lse|) against the float64 reference
//     and 2e-5 against the SIMT path (products of bfloat16 values are exact
//     in float32; only the order of the sums differs).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/cuda/attention_mma.cuh"
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

using Case = cuda_test::AttentionCase;
using cuda_test::ReferenceLse;

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
    AttentionForward(d_qkv, c.H, d_out, d_lse, AttentionPath::kMma);
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
    AttentionBackward(d_dout, d_qkv, d_out, d_lse, c.H, d_dqkv,
                      AttentionPath::kMma);
    ExpectClose(d_dqkv, dqkv, Tolerance(dtype(), 1e-4, 2e-2), "dqkv");

    // Both passes repeat to the bit.
    Tensor again = Tensor::Empty(d_out.shape(), dtype(), Gpu());
    Tensor lse_again = Tensor::Empty(lse_shape, DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, again, lse_again, AttentionPath::kMma);
    Tensor dqkv_again =
        ToDevice(Rounded(Random(qkv.shape(), 3), dtype()), dtype());
    AttentionBackward(d_dout, d_qkv, again, lse_again, c.H, dqkv_again,
                      AttentionPath::kMma);
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

// kernel_test::BandError over columns [part·C, (part + 1)·C) of (B, T, 3C)
// tensors (float32, CPU): part 0 is dQ, 1 dK, 2 dV.
double ThirdError(const Tensor& a, const Tensor& b, int64_t C, int part) {
  return kernel_test::BandError(a, b, 3 * C, part * C, (part + 1) * C);
}

// One path's results on the device: output, row log-sum-exps, and the
// gradient from zero.
struct PathResult {
  Tensor out, lse, dqkv;
};

class CudaAttentionMmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TRELLIS_REQUIRE_CUDA_DEVICE();
    const cuda_launch::AttentionDims dims{1, 128, 2, 64};
    if (!cuda_launch::MmaAttentionSupported(cuda_launch::Elem::kBF16, dims,
                                            {})) {
      GTEST_SKIP() << "no tensor-core attention here: it needs a GPU of "
                      "compute capability 8.0 or newer and a build for "
                      "CUDA architectures 80 or newer "
                      "(-DCMAKE_CUDA_ARCHITECTURES=90 on an H100)";
    }
  }

  // Forward and backward (onto a zero dqkv) on `path`.
  static PathResult Run(AttentionPath path, const Case& c, const Tensor& qkv,
                        const Tensor& dout) {
    const int64_t C = c.H * c.D;
    PathResult r;
    const Tensor d_qkv = ToDevice(qkv, DType::kBF16);
    r.out = Tensor::Empty({c.B, c.T, C}, DType::kBF16, Gpu());
    r.lse = Tensor::Empty({c.B, c.H, c.T}, DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, r.out, r.lse, path);
    r.dqkv = Tensor::Zeros(qkv.shape(), DType::kBF16, Gpu());
    AttentionBackward(ToDevice(dout, DType::kBF16), d_qkv, r.out, r.lse, c.H,
                      r.dqkv, path);
    return r;
  }

  void Check(const Case& c) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T
                                    << " H=" << c.H << " D=" << c.D);
    const int64_t C = c.H * c.D;
    const Tensor qkv =
        Rounded(Random({c.B, c.T, 3 * C}, 11, -2, 2), DType::kBF16);
    const Tensor dout = Rounded(Random({c.B, c.T, C}, 12), DType::kBF16);
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kF32);
    Tensor probs = Tensor::Empty(
        AttentionSavedShape(Device::Cpu(), c.B, c.T, c.H), DType::kF32);
    AttentionForward(qkv, c.H, out, probs);
    Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF32);
    AttentionBackward(dout, qkv, out, probs, c.H, dqkv);

    const PathResult mma = Run(AttentionPath::kMma, c, qkv, dout);
    const PathResult simt = Run(AttentionPath::kSimt, c, qkv, dout);
    const Tensor mma_out = ToHost(mma.out), simt_out = ToHost(simt.out);
    const Tensor mma_lse = ToHost(mma.lse), simt_lse = ToHost(simt.lse);
    const Tensor mma_dqkv = ToHost(mma.dqkv), simt_dqkv = ToHost(simt.dqkv);

    // The switch took effect: the paths round differently, so some output
    // element differs.
    int64_t differing = 0;
    for (int64_t i = 0; i < mma_out.numel(); ++i) {
      differing += mma_out.data<float>()[i] != simt_out.data<float>()[i];
    }
    if (c.T > 1) {
      EXPECT_GT(differing, 0) << "both runs took the same path";
    }

    EXPECT_LE(kernel_test::RelError(mma_out, out), 1e-2) << "out vs CPU";
    EXPECT_LE(kernel_test::RelError(mma_out, simt_out), 1e-2) << "out vs SIMT";
    const char* names[] = {"dQ", "dK", "dV"};
    for (int part = 0; part < 3; ++part) {
      EXPECT_LE(ThirdError(mma_dqkv, dqkv, C, part), 2e-2)
          << names[part] << " vs CPU";
      EXPECT_LE(ThirdError(mma_dqkv, simt_dqkv, C, part), 2e-2)
          << names[part] << " vs SIMT";
    }
    for (int64_t i = 0; i < mma_lse.numel(); ++i) {
      const double expected = simt_lse.data<float>()[i];
      ASSERT_NEAR(mma_lse.data<float>()[i], expected,
                  2e-5 * std::max(1.0, std::abs(expected)))
          << "lse " << i << " vs SIMT";
    }
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t t = 0; t < c.T; t += std::max<int64_t>(1, c.T / 29)) {
          const double expected = ReferenceLse(qkv, c, b, h, t);
          EXPECT_NEAR(mma_lse.data<float>()[(b * c.H + h) * c.T + t], expected,
                      1e-5 * std::max(1.0, std::abs(expected)))
              << "row " << t << " of head " << h;
        }
      }
    }
  }
};

TEST_F(CudaAttentionMmaTest, AgreesWithCpuAndSimt) {
  Check({2, 128, 3, 64});   // batch and head offsets
  Check({1, 1000, 2, 64});  // T not a multiple of the 64-row tile
  Check({1, 1024, 2, 64});
  Check({1, 2048, 2, 64});
}

TEST_F(CudaAttentionMmaTest, OtherHeadWidthsAndShortSequences) {
  Check({1, 1000, 2, 128});
  Check({2, 77, 3, 32});
  Check({2, 1, 2, 64});   // one token: the output is v
  Check({1, 65, 1, 64});  // one row past a tile
}

}  // namespace
}  // namespace trellis
