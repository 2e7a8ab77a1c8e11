// CUDA elementwise kernels, GELU, AdamW and the embeddings against their CPU
// twins, in float32 and bfloat16.
//
// Tolerances (max |gpu - cpu| / max |cpu|):
//   float32: 1e-6 where the arithmetic is the same (add, axpy, scale, bias,
//            AdamW), 1e-5 for GELU (tanhf against the CPU's polynomial tanh)
//            and for sums whose order differs (bias and embedding gradients);
//   bfloat16 outputs: 8e-3 (one rounding to 8 significant bits is at most
//            2^-9 ≈ 2e-3 relative to the element; headroom for the max
//            normalization and float32 ordering);
//   float32 results of bfloat16 inputs: as float32, since the CPU reference
//            sees the same rounded inputs.
#include <cmath>
#include <cstdint>

#include "framework/kernels/adamw.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/gelu.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Random;
using cuda_test::Rounded;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

using CudaElementwiseTest = cuda_test::DTypeTest;

TEST_P(CudaElementwiseTest, AddAxpyScale) {
  const Tensor a = Input({7, 333}, 1), b = Input({7, 333}, 2);
  Tensor out = Tensor::Empty(a.shape(), DType::kF32);
  Add(a, b, out);
  Tensor d_out = Tensor::Empty(a.shape(), dtype(), cuda_test::Gpu());
  Add(Dev(a), Dev(b), d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-6, kBf16Out), "Add");

  Tensor y = b.Clone();
  Axpy(-0.75, a, y);
  Tensor d_y = Dev(b);
  Axpy(-0.75, Dev(a), d_y);
  ExpectClose(d_y, y, Tolerance(dtype(), 1e-6, kBf16Out), "Axpy");

  Scale(y, 3.5);
  Scale(d_y, 3.5);
  ExpectClose(d_y, y, Tolerance(dtype(), 1e-6, 2 * kBf16Out), "Scale");
}

// Per-row weights (loss masking), some of them zero.
TEST_P(CudaElementwiseTest, ScaleRows) {
  Tensor x = Input({37, 129}, 5);
  Tensor w = Random({37}, 6);
  for (int64_t i = 0; i < 37; i += 5) w.data<float>()[i] = 0.0f;
  Tensor d_x = Dev(x);
  ScaleRows(w, x);
  ScaleRows(w.To(cuda_test::Gpu()), d_x);
  ExpectClose(d_x, x, Tolerance(dtype(), 1e-6, kBf16Out), "ScaleRows");
}

TEST_P(CudaElementwiseTest, BiasAndItsGradient) {
  const Tensor bias = Input({96}, 3);
  Tensor out = Input({5, 40, 96}, 4);
  Tensor d_out = Dev(out);
  AddBias(bias, out);
  AddBias(Dev(bias), d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-6, kBf16Out), "AddBias");

  // dbias accumulates in float32 onto a nonzero start.
  const Tensor dout = Input({5, 40, 96}, 5);
  Tensor dbias = Random({96}, 6);
  Tensor d_dbias = dbias.To(cuda_test::Gpu());
  BiasBackward(dout, dbias);
  BiasBackward(Dev(dout), d_dbias);
  ExpectClose(d_dbias, dbias, 1e-5, "BiasBackward");
}

TEST_P(CudaElementwiseTest, SumsAreFloat64) {
  const Tensor x = Input({(1 << 20) + 3}, 7);
  const Tensor d_x = Dev(x);
  const double sum = Sum(x), squares = SumOfSquares(x);
  EXPECT_NEAR(Sum(d_x), sum, 1e-9 * std::abs(squares));
  EXPECT_NEAR(SumOfSquares(d_x), squares, 1e-9 * squares);
  // Repeatable to the bit.
  EXPECT_EQ(Sum(d_x), Sum(d_x));
  // Many tensors at once: the same total as one at a time, in one wait.
  const Tensor y = Input({1000, 7}, 8), empty = Input({0}, 9);
  const Tensor d_y = Dev(y), d_empty = Dev(empty);
  const double many =
      SumOfSquares(std::vector<const Tensor*>{&d_x, &d_empty, &d_y});
  const double each = SumOfSquares(x) + SumOfSquares(y);
  EXPECT_NEAR(many, each, 1e-9 * each);
}

TEST_P(CudaElementwiseTest, Gelu) {
  const Tensor x = Input({13, 1000}, 8, -5, 5);
  Tensor out = Tensor::Empty(x.shape(), DType::kF32);
  GeluForward(x, out);
  Tensor d_out = Tensor::Empty(x.shape(), dtype(), cuda_test::Gpu());
  GeluForward(Dev(x), d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "GeluForward");

  const Tensor dout = Input(x.shape(), 9);
  Tensor dx = Input(x.shape(), 10);
  Tensor d_dx = Dev(dx);
  GeluBackward(x, dout, dx);
  GeluBackward(Dev(x), Dev(dout), d_dx);
  ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-5, kBf16Out), "GeluBackward");
}

TEST_P(CudaElementwiseTest, AdamWMatchesOverThreeSteps) {
  Tensor param = Input({64, 77}, 11);
  Tensor m = Tensor::Zeros(param.shape(), DType::kF32);
  Tensor v = Tensor::Zeros(param.shape(), DType::kF32);
  Tensor d_param = Dev(param);
  Tensor d_m = m.To(cuda_test::Gpu()), d_v = v.To(cuda_test::Gpu());
  AdamWHyper hyper;
  hyper.lr = 1e-2;
  hyper.weight_decay = 0.1;
  hyper.grad_scale = 0.5;
  for (int step = 1; step <= 3; ++step) {
    hyper.step = step;
    const Tensor grad = Input(param.shape(), 20 + step);
    AdamWStep(hyper, grad, param, m, v);
    AdamWStep(hyper, Dev(grad), d_param, d_m, d_v);
    // The bfloat16 reference must see the parameter rounded each step too.
    if (dtype() == DType::kBF16) param = Rounded(param, dtype());
  }
  ExpectClose(d_param, param, Tolerance(dtype(), 1e-6, kBf16Out), "param");
  // Moments are float32; with bfloat16 parameters they depend only on the
  // (rounded) gradients, so they match as closely.
  ExpectClose(d_m, m, 1e-6, "m");
  ExpectClose(d_v, v, 1e-6, "v");
}

Tensor Ids(int64_t n, int32_t below, uint64_t seed) {
  const Tensor r = Random({n}, seed, 0, below);
  Tensor ids = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(r.data<float>()[i]);
  }
  return ids;
}

TEST_P(CudaElementwiseTest, VocabShardEmbedding) {
  // The shard holds rows [20, 50) of a 60-row table; other ids give zeros.
  const int64_t vocab_start = 20, C = 48, N = 300;
  const Tensor ids = Ids(N, 60, 30);
  const Tensor table = Input({30, C}, 31);
  Tensor out = Tensor::Empty({N, C}, DType::kF32);
  EmbeddingForward(ids, table, vocab_start, out);
  Tensor d_out = Tensor::Empty({N, C}, dtype(), cuda_test::Gpu());
  EmbeddingForward(ids.To(cuda_test::Gpu()), Dev(table), vocab_start, d_out);
  ExpectClose(d_out, out, 0.0, "EmbeddingForward");

  // Repeated ids accumulate; float32 table gradient.
  const Tensor dout = Input({N, C}, 32);
  Tensor dtable = Random({30, C}, 33);
  Tensor d_dtable = dtable.To(cuda_test::Gpu());
  EmbeddingBackwardWeight(ids, dout, vocab_start, dtable);
  EmbeddingBackwardWeight(ids.To(cuda_test::Gpu()), Dev(dout), vocab_start,
                          d_dtable);
  ExpectClose(d_dtable, dtable, 1e-5, "EmbeddingBackwardWeight");
}

TEST_P(CudaElementwiseTest, PositionEmbedding) {
  const Tensor wpe = Input({20, 24}, 40);
  Tensor x = Input({3, 16, 24}, 41);
  Tensor d_x = Dev(x);
  AddPositionEmbedding(wpe, x);
  AddPositionEmbedding(Dev(wpe), d_x);
  ExpectClose(d_x, x, Tolerance(dtype(), 1e-6, kBf16Out), "AddPosition");

  const Tensor dout = Input({3, 16, 24}, 42);
  Tensor dwpe = Random({20, 24}, 43);
  Tensor d_dwpe = dwpe.To(cuda_test::Gpu());
  PositionEmbeddingBackwardWeight(dout, dwpe);
  PositionEmbeddingBackwardWeight(Dev(dout), d_dwpe);
  ExpectClose(d_dwpe, dwpe, 1e-6, "PositionEmbeddingBackwardWeight");
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaElementwiseTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
