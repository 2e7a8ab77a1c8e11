// The backward's fused and multi-tensor CUDA kernels against the CPU
// reference, in float32 and bfloat16, and a block backward's real launch
// count against the CPU's modeled one.
//
// Tolerances (max |gpu - cpu| / max |cpu|):
//   GEMM outputs (MatmulBackwardInput written, MatmulBackwardWeight and its
//     epilogue's bias gradient): float32 1e-5 (the K-term sums in another
//     order); bfloat16 8e-3 (one rounding of bfloat16 outputs; the float32
//     weight and bias gradients of bfloat16 operands 1e-5);
//   MatmulBackwardInputGelu: float32 1e-4 (cuBLASLt's own GELU derivative);
//     bfloat16 1.6e-2 (its GEMM result is rounded before the derivative is
//     applied on the unfused path, and once after on the fused one);
//   LayerNormBackwardInputResidual: float32 1e-5; bfloat16 8e-3;
//   cross-entropy row max 0 (exact), sum of exponentials 1e-5 (float32
//     sums in another order), dlogits float32 1e-5, bfloat16 8e-3; the
//     fused classifier's losses 1e-5 (an online sum), its dlogits as above;
//   ColumnSumsMany: 1e-5 (float32 sums in another order, of the same
//     bfloat16 or float32 inputs);
//   AdamWStepMany against a loop of the GPU's AdamWStep and Convert: 0;
//   the 128-bit elementwise kernels on aligned and unaligned views, against
//     the CPU: float32 1e-6 (Add, Axpy, Scale exact; GELU's tanhf), bfloat16
//     8e-3.
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"
#include "framework/launch_count.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/transformer/block_launch_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::ToHost;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

class CudaBackwardFusionTest : public cuda_test::DTypeTest {
 protected:
  // LayerNormBackwardInputResidual on (70, C) against the CPU.
  void LayerNormResidualCase(int64_t C);
};

bool SameBits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.To(Device::Cpu()), hb = b.To(Device::Cpu());
  return ha.nbytes() == hb.nbytes() &&
         std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

TEST_P(CudaBackwardFusionTest, WrittenInputGradientIgnoresOldContent) {
  const int64_t N = 96, K = 72, M = 40;
  for (const WeightLayout layout :
       {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    const Shape w_shape =
        layout == WeightLayout::kInOut ? Shape{K, M} : Shape{M, K};
    const Tensor dout = Input({N, M}, 1), w = Input(w_shape, 2);
    Tensor ref = Tensor::Empty({N, K}, DType::kF32);
    MatmulBackwardInput(dout, w, ref, layout, GradWrite::kWrite);
    Tensor d_dx = DevEmpty({N, K});
    d_dx.Fill(std::numeric_limits<double>::quiet_NaN());
    MatmulBackwardInput(Dev(dout), Dev(w), d_dx, layout, GradWrite::kWrite);
    ExpectClose(d_dx, ref, Tolerance(dtype(), 1e-5, kBf16Out), "dx");
  }
}

TEST_P(CudaBackwardFusionTest, InputGeluMatchesCpu) {
  // K = 72 fits DGELU's epilogue; K = 30 (not a multiple of 8) falls back.
  for (const int64_t K : {72, 30}) {
    SCOPED_TRACE(K);
    const int64_t N = 64, M = 48;
    const Tensor dout = Input({N, M}, 3), w = Input({K, M}, 4);
    const Tensor pre = Input({N, K}, 5, -3, 3);
    Tensor ref = Tensor::Empty({N, K}, DType::kF32);
    MatmulBackwardInputGelu(dout, w, pre, ref);
    Tensor d_dpre = DevEmpty({N, K});
    d_dpre.Fill(std::numeric_limits<double>::quiet_NaN());
    MatmulBackwardInputGelu(Dev(dout), Dev(w), Dev(pre), d_dpre);
    ExpectClose(d_dpre, ref, Tolerance(dtype(), 1e-4, 1.6e-2), "dpre");
  }
}

TEST_P(CudaBackwardFusionTest, WeightGradientAndEpilogueBiasMatchCpu) {
  const int64_t N = 128, K = 64, M = 96;
  for (const WeightLayout layout :
       {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    const Shape w_shape =
        layout == WeightLayout::kInOut ? Shape{K, M} : Shape{M, K};
    const Tensor dout = Input({N, M}, 6), x = Input({N, K}, 7);
    const Tensor dw0 = cuda_test::Random(w_shape, 8);
    const Tensor db0 = cuda_test::Random({M}, 9);
    Tensor dw = dw0.Clone(), db = db0.Clone();
    MatmulBackwardWeight(dout, x, dw, db, layout);
    // float32 gradients of dtype() operands, as in training.
    Tensor d_dw = dw0.To(Gpu()), d_db = db0.To(Gpu());
    MatmulBackwardWeight(Dev(dout), Dev(x), d_dw, d_db, layout);
    ExpectClose(d_dw, dw, 1e-5, "dw");
    ExpectClose(d_db, db, 1e-5, "dbias");
  }
}

void CudaBackwardFusionTest::LayerNormResidualCase(int64_t C) {
  const int64_t N = 70;
  const Tensor x = Input({N, C}, 10, 1, 3), w = Input({C}, 11, 0.5, 1.5);
  const Tensor b = Input({C}, 12), dout = Input({N, C}, 13);
  const Tensor residual = Input({N, C}, 14);
  Tensor out = Tensor::Empty({N, C}, DType::kF32);
  Tensor mean = Tensor::Empty({N}, DType::kF32);
  Tensor rstd = Tensor::Empty({N}, DType::kF32);
  LayerNormForward(x, w, b, out, mean, rstd);
  Tensor ref = Tensor::Empty({N, C}, DType::kF32);
  LayerNormBackwardInputResidual(dout, x, w, mean, rstd, residual, ref);
  Tensor d_dx = DevEmpty({N, C});
  LayerNormBackwardInputResidual(Dev(dout), Dev(x), Dev(w), mean.To(Gpu()),
                                 rstd.To(Gpu()), Dev(residual), d_dx);
  ExpectClose(d_dx, ref, Tolerance(dtype(), 1e-5, kBf16Out), "dx");
}

TEST_P(CudaBackwardFusionTest, LayerNormResidualMatchesCpu) {
  // C = 768: 16-byte packs; C = 100: rows misaligned, one column at a time.
  for (const int64_t C : {768, 100}) {
    SCOPED_TRACE(C);
    LayerNormResidualCase(C);
  }
}

TEST_P(CudaBackwardFusionTest, PackedCrossEntropyMatchesCpu) {
  // Vl = 1024 takes 16-byte packs, 1003 the one-element path; the last 9
  // columns are padding.
  for (const int64_t Vl : {1024, 1003}) {
    SCOPED_TRACE(Vl);
    const int64_t N = 12, valid = Vl - 9;
    const Tensor logits = Input({N, Vl}, 80, -4, 4);
    Tensor targets = Tensor::Empty({N}, DType::kI32);
    for (int64_t i = 0; i < N; ++i) {
      targets.data<int32_t>()[i] = static_cast<int32_t>((i * 97) % valid);
    }
    Tensor max = Tensor::Empty({N}, DType::kF32);
    Tensor sumexp = Tensor::Empty({N}, DType::kF32);
    Tensor dlogits = Tensor::Empty({N, Vl}, DType::kF32);
    CrossEntropyRowMax(logits, valid, max);
    CrossEntropyRowSumExp(logits, valid, max, sumexp);
    CrossEntropyBackward(logits, targets, 0, valid, max, sumexp, 0.5, dlogits);
    const Tensor g_logits = Dev(logits), g_targets = targets.To(Gpu());
    Tensor g_max = F32({N}), g_sumexp = F32({N}), g_dlogits = DevEmpty({N, Vl});
    CrossEntropyRowMax(g_logits, valid, g_max);
    CrossEntropyRowSumExp(g_logits, valid, g_max, g_sumexp);
    CrossEntropyBackward(g_logits, g_targets, 0, valid, g_max, g_sumexp, 0.5,
                         g_dlogits);
    ExpectClose(g_max, max, 0.0, "row max");
    ExpectClose(g_sumexp, sumexp, 1e-5, "sum of exponentials");
    ExpectClose(g_dlogits, dlogits, Tolerance(dtype(), 1e-5, kBf16Out),
                "dlogits");
  }
}

// The fused classifier on the device against the CPU's, with and without
// row weights, the gradient over the logits (packed rows and the
// one-element path), and losses alone. 50304 columns (GPT-2's padded
// vocabulary) are all kept in registers between the kernel's passes; 60016
// are more than that, so the rest of the row is read again.
TEST_P(CudaBackwardFusionTest, FusedCrossEntropyMatchesCpu) {
  for (const int64_t Vl : {1024, 1003, 50304, 60016}) {
    SCOPED_TRACE(Vl);
    const int64_t N = 12, valid = Vl - 9;
    const Tensor logits = Input({N, Vl}, 81, -4, 4);
    Tensor targets = Tensor::Empty({N}, DType::kI32);
    Tensor weights = Tensor::Empty({N}, DType::kF32);
    for (int64_t i = 0; i < N; ++i) {
      targets.data<int32_t>()[i] = static_cast<int32_t>((i * 89) % valid);
      weights.data<float>()[i] = static_cast<float>(i % 3) * 0.5f;
    }
    const Tensor g_targets = targets.To(Gpu()), g_weights = weights.To(Gpu());
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(weighted);
      const Tensor w = weighted ? weights : Tensor();
      const Tensor g_w = weighted ? g_weights : Tensor();
      Tensor losses = Tensor::Empty({N}, DType::kF32);
      Tensor dlogits = logits.Clone();
      CrossEntropyFused(dlogits, targets, valid, w, 0.5, losses, dlogits);
      Tensor g_losses = F32({N}), g_dlogits = Dev(logits);
      CrossEntropyFused(g_dlogits, g_targets, valid, g_w, 0.5, g_losses,
                        g_dlogits);
      ExpectClose(g_losses, losses, 1e-5, "losses");
      ExpectClose(g_dlogits, dlogits, Tolerance(dtype(), 1e-5, kBf16Out),
                  "dlogits");
      Tensor g_only = F32({N}), none;
      CrossEntropyFused(Dev(logits), g_targets, valid, g_w, 0.5, g_only, none);
      ExpectClose(g_only, losses, 1e-5, "losses without the gradient");
    }
  }
}

// The LayerNorm job over all rows, then over a share of them as GPT-2's
// block under sequence parallelism passes it (the bias job keeps all). The
// bias and LayerNorm jobs' columns take 16-byte loads; a third job of 77
// columns takes one column per thread, in the same launch.
TEST_P(CudaBackwardFusionTest, ColumnSumsManyMatchesCpuAndIsRepeatable) {
  const int64_t N = 1000;
  for (const int64_t norm_rows : {N, N / 4}) {
    SCOPED_TRACE(testing::Message() << "LayerNorm rows " << norm_rows);
    const Tensor d1 = Input({N, 2304}, 15), d2 = Input({norm_rows, 768}, 16);
    const Tensor d3 = Input({N, 77}, 23);
    const Tensor x = Input({norm_rows, 768}, 17, 1, 2);
    const Tensor mean = cuda_test::Random({norm_rows}, 18, 1, 2);
    const Tensor rstd = cuda_test::Random({norm_rows}, 19, 0.5, 2);
    const Tensor db1_0 = cuda_test::Random({2304}, 20);
    const Tensor dw_0 = cuda_test::Random({768}, 21);
    const Tensor db2_0 = cuda_test::Random({768}, 22);
    const Tensor db3_0 = cuda_test::Random({77}, 24);
    Tensor db1 = db1_0.Clone(), dw = dw_0.Clone(), db2 = db2_0.Clone();
    Tensor db3 = db3_0.Clone();
    ColumnSumsMany({{.dout = &d1, .db = &db1},
                    {.dout = &d2,
                     .x = &x,
                     .mean = &mean,
                     .rstd = &rstd,
                     .dw = &dw,
                     .db = &db2},
                    {.dout = &d3, .db = &db3}});
    const Tensor g1 = Dev(d1), g2 = Dev(d2), g3 = Dev(d3), gx = Dev(x);
    const Tensor gmean = mean.To(Gpu()), grstd = rstd.To(Gpu());
    std::vector<Tensor> runs;
    for (int run = 0; run < 2; ++run) {
      Tensor g_db1 = db1_0.To(Gpu()), g_dw = dw_0.To(Gpu()),
             g_db2 = db2_0.To(Gpu()), g_db3 = db3_0.To(Gpu());
      // Twice into the same outputs: the strip counters are back at 0 after
      // each launch, so the second call adds the sums again.
      for (int call = 0; call < 2; ++call) {
        ColumnSumsMany({{.dout = &g1, .db = &g_db1},
                        {.dout = &g2,
                         .x = &gx,
                         .mean = &gmean,
                         .rstd = &grstd,
                         .dw = &g_dw,
                         .db = &g_db2},
                        {.dout = &g3, .db = &g_db3}});
      }
      runs.push_back(g_dw);
      // Once more on the CPU: db = db0 + 2·sums.
      const auto twice = [](const Tensor& start, const Tensor& once) {
        Tensor t = once.Clone();
        Axpy(-1, start, t);
        Axpy(1, once, t);
        return t;
      };
      ExpectClose(g_db1, twice(db1_0, db1), 1e-5, "db (bias job)");
      ExpectClose(g_dw, twice(dw_0, dw), 1e-5, "dw (LayerNorm job)");
      ExpectClose(g_db2, twice(db2_0, db2), 1e-5, "db (LayerNorm job)");
      ExpectClose(g_db3, twice(db3_0, db3), 1e-5, "db (77 columns)");
    }
    EXPECT_TRUE(SameBits(runs[0], runs[1])) << "not deterministic";
  }
}

TEST_P(CudaBackwardFusionTest, AdamWStepManyEqualsOneStepPerParameter) {
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  hyper.step = 2;
  hyper.grad_scale = 0.7;
  const std::vector<Shape> shapes = {{300, 7}, {5}, {1000}};
  std::vector<Tensor> grads, params, ms, vs, values;
  std::vector<Tensor> p_ref, m_ref, v_ref, values_ref;
  for (size_t i = 0; i < shapes.size(); ++i) {
    grads.push_back(cuda_test::Random(shapes[i], 30 + i).To(Gpu()));
    params.push_back(cuda_test::Random(shapes[i], 40 + i).To(Gpu()));
    ms.push_back(cuda_test::Random(shapes[i], 50 + i).To(Gpu()));
    vs.push_back(cuda_test::Random(shapes[i], 60 + i, 0, 1).To(Gpu()));
    values.push_back(DevEmpty(shapes[i]));
    p_ref.push_back(params[i].Clone());
    m_ref.push_back(ms[i].Clone());
    v_ref.push_back(vs[i].Clone());
    values_ref.push_back(DevEmpty(shapes[i]));
    AdamWHyper one = hyper;
    one.weight_decay = 0.1 * i;
    AdamWStep(one, grads[i], p_ref[i], m_ref[i], v_ref[i]);
    Convert(p_ref[i], values_ref[i]);
  }
  std::vector<AdamWTensors> entries;
  for (size_t i = 0; i < shapes.size(); ++i) {
    entries.push_back(
        {&grads[i], &params[i], &ms[i], &vs[i], 0.1 * i, &values[i]});
  }
  LaunchCounter counter;
  AdamWStepMany(hyper, entries);
  EXPECT_EQ(counter.count(), 1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(SameBits(params[i], p_ref[i]));
    EXPECT_TRUE(SameBits(ms[i], m_ref[i]));
    EXPECT_TRUE(SameBits(vs[i], v_ref[i]));
    EXPECT_TRUE(SameBits(values[i], values_ref[i]));
  }
}

TEST_P(CudaBackwardFusionTest, PackedElementwiseMatchesCpuOnAnyAlignment) {
  // n = 1037 leaves a tail after the 16-byte packs; the views starting one
  // element in are misaligned and take the one-element path.
  const int64_t n = 1038;
  const Tensor a = Input({n}, 70, -3, 3), b = Input({n}, 71);
  for (const int64_t offset : {0, 1}) {
    SCOPED_TRACE(offset);
    const int64_t len = n - 1;
    const Tensor ca = a.Narrow(offset, len), cb = b.Narrow(offset, len);
    const Tensor ga = Dev(a).Narrow(offset, len);
    const Tensor gb = Dev(b).Narrow(offset, len);
    const double tol = Tolerance(dtype(), 1e-6, kBf16Out);

    Tensor sum = Tensor::Empty({len}, DType::kF32);
    Add(ca, cb, sum);
    Tensor g_sum = Dev(b).Narrow(offset, len);
    Add(ga, gb, g_sum);
    ExpectClose(g_sum, sum, tol, "Add");

    Tensor y = cb.Clone();
    Axpy(0.5, ca, y);
    Scale(y, 3.0);
    Tensor g_y = Dev(b).Narrow(offset, len);
    Axpy(0.5, ga, g_y);
    Scale(g_y, 3.0);
    ExpectClose(g_y, y, tol, "Axpy, Scale");

    Tensor gelu = Tensor::Empty({len}, DType::kF32);
    GeluForward(ca, gelu);
    Tensor g_gelu = Dev(b).Narrow(offset, len);
    GeluForward(ga, g_gelu);
    ExpectClose(g_gelu, gelu, tol, "GeluForward");

    Tensor dx = cb.Clone();
    GeluBackward(ca, cb, dx);
    Tensor g_dx = Dev(b).Narrow(offset, len);
    GeluBackward(ga, gb, g_dx);
    ExpectClose(g_dx, dx, tol, "GeluBackward");
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaBackwardFusionTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

TEST(CudaBlockLaunchTest, BackwardLaunchesAsTheCpuModels) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "zero-bubble" : "1F1B");
    // The CPU models the tensor-core attention (a zero-fill and three
    // kernels); cuDNN's backward is one graph and makes fewer.
    BlockOptions options{Recompute::kNone, defer};
    options.attention = AttentionPath::kMma;
    const int64_t modeled =
        block_launch::CountBlockBackward(Device::Cpu(), DType::kF32, options);
    const int64_t real =
        block_launch::CountBlockBackward(Gpu(), DType::kBF16, options);
    EXPECT_EQ(real, modeled);
    EXPECT_LE(real, defer ? 16 : 15);
    options.attention = AttentionPath::kCudnn;
    EXPECT_LT(block_launch::CountBlockBackward(Gpu(), DType::kBF16, options),
              modeled);
  }
}

}  // namespace
}  // namespace trellis
