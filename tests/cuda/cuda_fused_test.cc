// The fused CUDA kernels (residual add + LayerNorm, dense + GELU) through
// their public calls, against the CPU's unfused sequences and the GPU's own
// unfused calls, in float32 and bfloat16.
//
// Tolerances (max |gpu - cpu| / max |cpu|):
//   AddLayerNormForward against Add then LayerNormForward on the CPU:
//     sum: float32 0 (one float32 add either way); bfloat16 8e-3 (the GPU
//       rounds the sum, the CPU reference keeps it in float32);
//     out: float32 1e-5 (LayerNorm's sums in another order); bfloat16 8e-3,
//       against a CPU LayerNorm of the GPU's rounded sum, since the kernel
//       normalizes the sum as stored;
//     mean, rstd: 1e-5 (float32 statistics of the same values);
//   AddLayerNormForward against the GPU's Add then LayerNormForward: 0, in
//     both dtypes (the same rows, lanes and rounding);
//   MatmulForwardGelu against MatmulForward then GeluForward on the CPU:
//     pre_gelu float32 1e-5 (cuBLASLt against OpenBLAS, the K-term sums in
//     another order), out float32 1e-4 (cuBLASLt's own tanh); bfloat16
//     8e-3 for both (one rounding of the outputs);
//   MatmulForwardResidual against MatmulForward then Add on the CPU: the
//     same tolerances as the dense layer (one rounding of the sum).
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/gelu.h"
#include "framework/kernels/layernorm.h"
#include "framework/kernels/matmul.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::ToHost;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

struct DenseCase {
  int64_t N, K, M;
  WeightLayout layout;
  bool bias;
};

// "64x96x256 in-out bias", for traces.
std::string Label(const DenseCase& c) {
  return absl::StrCat(c.N, "x", c.K, "x", c.M,
                      c.layout == WeightLayout::kInOut ? " in-out" : " out-in",
                      c.bias ? " bias" : "");
}

// A dense layer's CPU inputs: x (N, K), w in the case's layout, the bias
// when the case has one; drawn from seeds seed, seed + 1, seed + 2.
struct DenseInputs {
  Tensor x, w, bias;
};

class CudaFusedTest : public cuda_test::DTypeTest {
 protected:
  DenseInputs Dense(const DenseCase& c, uint64_t seed) {
    const Shape w_shape =
        c.layout == WeightLayout::kInOut ? Shape{c.K, c.M} : Shape{c.M, c.K};
    return {Input({c.N, c.K}, seed), Input(w_shape, seed + 1),
            c.bias ? Input({c.M}, seed + 2) : Tensor()};
  }
  Tensor DevOrNone(const Tensor& t) { return t.defined() ? Dev(t) : Tensor(); }
};

TEST_P(CudaFusedTest, AddLayerNormMatchesAddThenLayerNorm) {
  for (const int64_t C : {768, 100}) {
    SCOPED_TRACE(C);
    const int64_t N = 130;
    const Shape shape{2, N / 2, C};
    // An offset mean, so that the two-pass variance matters.
    const Tensor a = Input(shape, 1, 2.0, 5.0), b = Input(shape, 2);
    const Tensor w = Input({C}, 3, 0.5, 1.5), bias = Input({C}, 4);
    const Tensor d_w = Dev(w), d_bias = Dev(bias);

    // The CPU's unfused pair on the same rounded inputs.
    Tensor sum = Tensor::Empty(shape, DType::kF32);
    Add(a, b, sum);

    // Fused on the GPU, sum in its own buffer.
    const Tensor d_a = Dev(a), d_b = Dev(b);
    Tensor d_sum = DevEmpty(shape), d_out = DevEmpty(shape);
    Tensor d_mean = F32({N}), d_rstd = F32({N});
    AddLayerNormForward(d_a, d_b, d_w, d_bias, d_sum, d_out, d_mean, d_rstd);
    ExpectClose(d_sum, sum, Tolerance(dtype(), 0.0, kBf16Out), "sum");

    // The CPU LayerNorm of the sum the GPU stored (in float32, the CPU's).
    const Tensor stored_sum = ToHost(d_sum);
    Tensor out = Tensor::Empty(shape, DType::kF32);
    Tensor mean = Tensor::Empty({N}, DType::kF32);
    Tensor rstd = Tensor::Empty({N}, DType::kF32);
    LayerNormForward(stored_sum, w, bias, out, mean, rstd);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "out");
    ExpectClose(d_mean, mean, 1e-5, "mean");
    ExpectClose(d_rstd, rstd, 1e-5, "rstd");

    // The GPU's unfused pair gives the same bits.
    Tensor u_sum = DevEmpty(shape), u_out = DevEmpty(shape);
    Tensor u_mean = F32({N}), u_rstd = F32({N});
    Add(d_a, d_b, u_sum);
    LayerNormForward(u_sum, d_w, d_bias, u_out, u_mean, u_rstd);
    ExpectClose(d_sum, ToHost(u_sum), 0.0, "sum vs GPU Add");
    ExpectClose(d_out, ToHost(u_out), 0.0, "out vs GPU LayerNorm");
    ExpectClose(d_mean, ToHost(u_mean), 0.0, "mean vs GPU LayerNorm");
    ExpectClose(d_rstd, ToHost(u_rstd), 0.0, "rstd vs GPU LayerNorm");

    // In place, as the block does x2 += x: sum aliases a.
    Tensor d_x2 = Dev(a);
    Tensor d_out2 = DevEmpty(shape), d_mean2 = F32({N}), d_rstd2 = F32({N});
    AddLayerNormForward(d_x2, d_b, d_w, d_bias, d_x2, d_out2, d_mean2, d_rstd2);
    ExpectClose(d_x2, ToHost(u_sum), 0.0, "aliased sum");
    ExpectClose(d_out2, ToHost(u_out), 0.0, "aliased out");
    ExpectClose(d_mean2, ToHost(u_mean), 0.0, "aliased mean");
    ExpectClose(d_rstd2, ToHost(u_rstd), 0.0, "aliased rstd");
  }
}

TEST_P(CudaFusedTest, MatmulGeluMatchesMatmulThenGelu) {
  // M = 256 takes the GELU epilogue; M = 36 (not a multiple of 8) the
  // unfused fallback.
  const DenseCase cases[] = {{64, 96, 256, WeightLayout::kInOut, true},
                             {64, 96, 256, WeightLayout::kOutIn, false},
                             {37, 77, 36, WeightLayout::kInOut, true},
                             {37, 77, 36, WeightLayout::kOutIn, true}};
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(Label(c));
    const auto [x, w, bias] = Dense(c, 10);
    Tensor pre = Tensor::Empty({c.N, c.M}, DType::kF32);
    Tensor out = Tensor::Empty({c.N, c.M}, DType::kF32);
    MatmulForward(x, w, bias, pre, c.layout);
    GeluForward(pre, out);

    Tensor d_pre = DevEmpty({c.N, c.M}), d_out = DevEmpty({c.N, c.M});
    MatmulForwardGelu(Dev(x), Dev(w), DevOrNone(bias), d_pre, d_out, c.layout);
    ExpectClose(d_pre, pre, Tolerance(dtype(), 1e-5, kBf16Out), "pre_gelu");
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-4, kBf16Out), "gelu");
  }
}

// The dense layer with the residual as the GEMM's C matrix against
// MatmulForward then Add on the CPU: float32 1e-5 (cuBLASLt against
// OpenBLAS), bfloat16 8e-3 (the sum rounded once, the CPU's pair in
// float32). M = 36 and N = 37 give unaligned rows; the out-in layout is the
// tied head's.
TEST_P(CudaFusedTest, MatmulResidualMatchesMatmulThenAdd) {
  const DenseCase cases[] = {{64, 96, 256, WeightLayout::kInOut, true},
                             {64, 96, 256, WeightLayout::kOutIn, false},
                             {37, 77, 36, WeightLayout::kInOut, true},
                             {37, 77, 36, WeightLayout::kOutIn, true},
                             {8, 0, 16, WeightLayout::kInOut, true}};
  for (const DenseCase& c : cases) {
    SCOPED_TRACE(Label(c));
    const auto [x, w, bias] = Dense(c, 20);
    // A residual larger than the product, as the stream is in a model.
    const Tensor residual = Input({c.N, c.M}, 23, -4.0, 4.0);
    Tensor out = Tensor::Empty({c.N, c.M}, DType::kF32);
    MatmulForward(x, w, bias, out, c.layout);
    Add(out, residual, out);

    const Tensor d_residual = Dev(residual);
    Tensor d_out = DevEmpty({c.N, c.M});
    MatmulForwardResidual(Dev(x), Dev(w), DevOrNone(bias), d_residual, d_out,
                          c.layout);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "out");
    if (c.K == 0) {
      // The plain layer of no inputs is its bias in every row.
      Tensor d_dense = DevEmpty({c.N, c.M});
      Tensor dense = Tensor::Empty({c.N, c.M}, DType::kF32);
      MatmulForward(x, w, bias, dense, c.layout);
      MatmulForward(Dev(x), Dev(w), Dev(bias), d_dense, c.layout);
      ExpectClose(d_dense, dense, 0.0, "dense of no inputs");
    }
    // The residual is read, never written.
    ExpectClose(d_residual, residual, Tolerance(dtype(), 0.0, 0.0), "residual");
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFusedTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
