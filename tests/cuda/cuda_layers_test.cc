// CUDA LayerNorm, dense layers (cuBLASLt) and the cross-entropy pieces
// against their CPU twins, in float32 and bfloat16.
//
// Tolerances (max |gpu - cpu| / max |cpu|):
//   LayerNorm: float32 1e-5; bfloat16 outputs and dx 8e-3 (one rounding),
//     mean/rstd and float32 dw/db 1e-5 (same rounded inputs);
//   GEMMs: float32 1e-5 (cuBLASLt in full float32, no TF32, against
//     OpenBLAS; only the order of the K-term sums differs); bfloat16
//     outputs 8e-3; float32 weight gradients of bfloat16 operands 1e-5;
//     the GELU epilogue 1e-4 (cuBLASLt's own tanh);
//   cross-entropy: statistics and losses 1e-5 in both (float32 from the
//     same rounded logits); bfloat16 dlogits 8e-3.
#include <cstdint>

#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::Random;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

using CudaLayersTest = cuda_test::DTypeTest;

TEST_P(CudaLayersTest, LayerNorm) {
  for (const int64_t C : {768, 100}) {
    SCOPED_TRACE(C);
    const int64_t N = 130;
    // An offset mean, so that the two-pass variance matters.
    const Tensor x = Input({2, N / 2, C}, 1, 2.0, 5.0);
    const Tensor w = Input({C}, 2), b = Input({C}, 3);
    Tensor out = Tensor::Empty(x.shape(), DType::kF32);
    Tensor mean = Tensor::Empty({N}, DType::kF32);
    Tensor rstd = Tensor::Empty({N}, DType::kF32);
    LayerNormForward(x, w, b, out, mean, rstd);
    Tensor d_out = DevEmpty(x.shape()), d_mean = F32({N}), d_rstd = F32({N});
    const Tensor d_x = Dev(x), d_w = Dev(w);
    LayerNormForward(d_x, d_w, Dev(b), d_out, d_mean, d_rstd);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "out");
    ExpectClose(d_mean, mean, 1e-5, "mean");
    ExpectClose(d_rstd, rstd, 1e-5, "rstd");

    const Tensor dout = Input(x.shape(), 4);
    Tensor dx = Input(x.shape(), 5);
    Tensor d_dx = Dev(dx);
    LayerNormBackwardInput(dout, x, w, mean, rstd, dx);
    LayerNormBackwardInput(Dev(dout), d_x, d_w, d_mean, d_rstd, d_dx);
    ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-5, kBf16Out), "dx");

    Tensor dw = Random({C}, 6), db = Random({C}, 7);
    Tensor d_dw = dw.To(Gpu()), d_db = db.To(Gpu());
    LayerNormBackwardWeight(dout, x, mean, rstd, dw, db);
    LayerNormBackwardWeight(Dev(dout), d_x, d_mean, d_rstd, d_dw, d_db);
    ExpectClose(d_dw, dw, 1e-5, "dw");
    ExpectClose(d_db, db, 1e-5, "db");
  }
}

struct DenseCase {
  int64_t N, K, M;
  WeightLayout layout;
  bool bias;
};

TEST_P(CudaLayersTest, DenseForwardAndBackward) {
  const DenseCase cases[] = {{96, 128, 80, WeightLayout::kInOut, true},
                             {96, 128, 80, WeightLayout::kOutIn, false},
                             // Odd sizes: leading dimensions that leave the
                             // columns 2- or 4-byte aligned.
                             {37, 77, 33, WeightLayout::kInOut, true},
                             {37, 77, 33, WeightLayout::kOutIn, true}};
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << c.N << "x" << c.K << "x" << c.M
                 << (c.layout == WeightLayout::kInOut ? " in-out" : " out-in"));
    const Shape w_shape =
        c.layout == WeightLayout::kInOut ? Shape{c.K, c.M} : Shape{c.M, c.K};
    const Tensor x = Input({c.N, c.K}, 10), w = Input(w_shape, 11);
    const Tensor bias = c.bias ? Input({c.M}, 12) : Tensor();
    Tensor out = Tensor::Empty({c.N, c.M}, DType::kF32);
    MatmulForward(x, w, bias, out, c.layout);
    Tensor d_out = DevEmpty({c.N, c.M});
    const Tensor d_x = Dev(x), d_w = Dev(w);
    MatmulForward(d_x, d_w, c.bias ? Dev(bias) : Tensor(), d_out, c.layout);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "forward");

    // Backward accumulates onto nonzero gradients; dw and dbias float32.
    const Tensor dout = Input({c.N, c.M}, 13);
    const Tensor d_dout = Dev(dout);
    Tensor dx = Input({c.N, c.K}, 14);
    Tensor d_dx = Dev(dx);
    MatmulBackwardInput(dout, w, dx, c.layout);
    MatmulBackwardInput(d_dout, d_w, d_dx, c.layout);
    ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-5, kBf16Out), "dx");

    Tensor dw = Random(w_shape, 15), dbias = Random({c.M}, 16);
    Tensor d_dw = dw.To(Gpu()), d_dbias = dbias.To(Gpu());
    MatmulBackwardWeight(dout, x, dw, dbias, c.layout);
    MatmulBackwardWeight(d_dout, d_x, d_dw, d_dbias, c.layout);
    ExpectClose(d_dw, dw, 1e-5, "dw");
    ExpectClose(d_dbias, dbias, 1e-5, "dbias");
  }
}

TEST_P(CudaLayersTest, GeluEpilogueMatchesMatmulThenGelu) {
  for (const int64_t M : {256, 36}) {  // the epilogue, then the fallback
    SCOPED_TRACE(M);
    const int64_t N = 64, K = 96;
    const Tensor x = Input({N, K}, 20), w = Input({K, M}, 21);
    const Tensor bias = Input({M}, 22);
    Tensor pre = Tensor::Empty({N, M}, DType::kF32);
    Tensor out = Tensor::Empty({N, M}, DType::kF32);
    MatmulForward(x, w, bias, pre);
    GeluForward(pre, out);
    Tensor d_pre = DevEmpty({N, M}), d_out = DevEmpty({N, M});
    cuda::MatmulForwardGelu(Dev(x), Dev(w), Dev(bias), d_pre, d_out);
    ExpectClose(d_pre, pre, Tolerance(dtype(), 1e-5, kBf16Out), "pre_gelu");
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-4, kBf16Out), "gelu");
  }
}

TEST_P(CudaLayersTest, VocabParallelCrossEntropy) {
  // This shard holds ids [500, 1500) of which 950 are real; targets fall on
  // and off the shard.
  const int64_t N = 64, Vl = 1000, valid = 950, vocab_start = 500;
  const Tensor logits = Input({N, Vl}, 30, -8, 8);
  Tensor targets = Tensor::Empty({N}, DType::kI32);
  for (int64_t i = 0; i < N; ++i) {
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 37) % 2000);
  }
  const Tensor d_logits = Dev(logits), d_targets = targets.To(Gpu());
  auto vec = [&] { return Tensor::Empty({N}, DType::kF32); };
  Tensor row_max = vec(), sumexp = vec(), target = vec(), losses = vec();
  CrossEntropyRowMax(logits, valid, row_max);
  CrossEntropyRowSumExp(logits, valid, row_max, sumexp);
  CrossEntropyTargetLogit(logits, targets, vocab_start, valid, target);
  CrossEntropyLoss(row_max, sumexp, target, losses);
  Tensor d_row_max = F32({N}), d_sumexp = F32({N}), d_target = F32({N});
  Tensor d_losses = F32({N});
  CrossEntropyRowMax(d_logits, valid, d_row_max);
  CrossEntropyRowSumExp(d_logits, valid, d_row_max, d_sumexp);
  CrossEntropyTargetLogit(d_logits, d_targets, vocab_start, valid, d_target);
  CrossEntropyLoss(d_row_max, d_sumexp, d_target, d_losses);
  ExpectClose(d_row_max, row_max, 0.0, "row_max");
  ExpectClose(d_sumexp, sumexp, 1e-5, "sumexp");
  ExpectClose(d_target, target, 0.0, "target_logit");
  ExpectClose(d_losses, losses, 1e-5, "losses");

  // In place, as the LM head uses it; padded columns become 0.
  Tensor dlogits = logits.Clone();
  CrossEntropyBackward(logits, targets, vocab_start, valid, row_max, sumexp,
                       0.25, dlogits);
  Tensor d_dlogits = d_logits.Clone();
  CrossEntropyBackward(d_dlogits, d_targets, vocab_start, valid, d_row_max,
                       d_sumexp, 0.25, d_dlogits);
  ExpectClose(d_dlogits, dlogits, Tolerance(dtype(), 1e-5, kBf16Out),
              "dlogits");
  const Tensor back = cuda_test::ToHost(d_dlogits);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = valid; j < Vl; ++j) {
      ASSERT_EQ(back.data<float>()[i * Vl + j], 0.0f) << i << ", " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaLayersTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
