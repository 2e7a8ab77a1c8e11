// The CUDA kernels of Llama-family blocks against their CPU twins, in
// float32 and bfloat16: RMSNorm, the per-head q/k norm, SwiGLU, RoPE and
// grouped-query attention (Hkv < H key/value heads) on each attention path.
//
// Tolerances (max |gpu - cpu| / max |cpu|, CPU on the same rounded inputs):
//   RMSNorm: float32 1e-5; bfloat16 outputs, sums and dx 8e-3 (one
//     rounding); rstd and float32 dw 1e-5;
//   q/k norm: as RMSNorm; the saved input and the value heads exact;
//   SwiGLU: float32 1e-5 (expf against the CPU's polynomial exp, relative
//     3e-7); bfloat16 8e-3;
//   RoPE: float32 1e-6 (float32 tables on both); bfloat16 8e-3;
//   grouped-query attention: float32 output and gradients 1e-4; bfloat16
//     output 1e-2, dQ 2e-2, dK and dV 3e-2 (each the sum of a group's
//     bfloat16-rounded products, measured on its own part of dqkv).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "framework/kernels/attention.h"
#include "framework/kernels/qk_norm.h"
#include "framework/kernels/rmsnorm.h"
#include "framework/kernels/rope.h"
#include "framework/kernels/swiglu.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::Random;
using cuda_test::ToDevice;
using cuda_test::ToHost;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;
constexpr double kEps = 1e-5;

using CudaLlamaTest = cuda_test::DTypeTest;

TEST_P(CudaLlamaTest, RmsNorm) {
  for (const int64_t C : {2048, 100}) {
    SCOPED_TRACE(C);
    const int64_t N = 130;
    const Tensor x = Input({2, N / 2, C}, 1, -3.0, 3.0);
    const Tensor w = Input({C}, 2, 0.5, 1.5);
    Tensor out = Tensor::Empty(x.shape(), DType::kF32);
    Tensor rstd = Tensor::Empty({N}, DType::kF32);
    RmsNormForward(x, w, kEps, out, rstd);
    const Tensor d_x = Dev(x), d_w = Dev(w);
    Tensor d_out = DevEmpty(x.shape()), d_rstd = F32({N});
    RmsNormForward(d_x, d_w, kEps, d_out, d_rstd);
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "out");
    ExpectClose(d_rstd, rstd, 1e-5, "rstd");

    // The fused residual add: sum rounded to the dtype, then normalized.
    const Tensor r = Input(x.shape(), 3);
    Tensor sum = Tensor::Empty(x.shape(), DType::kF32);
    Tensor sum_out = Tensor::Empty(x.shape(), DType::kF32);
    Tensor sum_rstd = Tensor::Empty({N}, DType::kF32);
    Tensor d_sum = DevEmpty(x.shape()), d_sum_out = DevEmpty(x.shape());
    Tensor d_sum_rstd = F32({N});
    AddRmsNormForward(d_x, Dev(r), d_w, kEps, d_sum, d_sum_out, d_sum_rstd);
    const Tensor rounded_sum = ToHost(d_sum);
    AddRmsNormForward(x, r, w, kEps, sum, sum_out, sum_rstd);
    ExpectClose(d_sum, sum, Tolerance(dtype(), 0, kBf16Out), "sum");
    RmsNormForward(rounded_sum, w, kEps, sum_out, sum_rstd);
    ExpectClose(d_sum_out, sum_out, Tolerance(dtype(), 1e-5, kBf16Out),
                "fused out");
    ExpectClose(d_sum_rstd, sum_rstd, 1e-5, "fused rstd");

    // Backward input accumulates; the residual variant overwrites.
    const Tensor dout = Input(x.shape(), 4);
    Tensor dx = Input(x.shape(), 5);
    Tensor d_dx = Dev(dx);
    RmsNormBackwardInput(dout, x, w, rstd, dx);
    const Tensor d_dout = Dev(dout);
    RmsNormBackwardInput(d_dout, d_x, d_w, d_rstd, d_dx);
    ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-5, kBf16Out), "dx");
    const Tensor residual = Input(x.shape(), 6);
    Tensor dx_res = Tensor::Empty(x.shape(), DType::kF32);
    RmsNormBackwardInputResidual(dout, x, w, rstd, residual, dx_res);
    Tensor d_dx_res = Dev(Input(x.shape(), 7));  // garbage to overwrite
    RmsNormBackwardInputResidual(d_dout, d_x, d_w, d_rstd, Dev(residual),
                                 d_dx_res);
    ExpectClose(d_dx_res, dx_res, Tolerance(dtype(), 1e-5, kBf16Out),
                "dx residual");

    // Weight gradient into float32, accumulating.
    Tensor dw = Random({C}, 8);
    Tensor d_dw = dw.To(Gpu());
    RmsNormBackwardWeight(dout, x, rstd, dw);
    RmsNormBackwardWeight(d_dout, d_x, d_rstd, d_dw);
    ExpectClose(d_dw, dw, 1e-5, "dw");
  }
}

// Qwen3's per-head q/k RMSNorm in a fused qkv row of 4 query, 2 key and 2
// value heads: the value heads pass untouched, the weight gradient is
// written (over garbage), at Qwen3's head width and at one narrower than a
// warp.
TEST_P(CudaLlamaTest, QkNorm) {
  const int64_t H = 4, Hkv = 2, N = 130;
  for (const int64_t D : {128, 12}) {
    SCOPED_TRACE(D);
    const int64_t W = (H + 2 * Hkv) * D, normed = H + Hkv;
    const Tensor x = Input({2, N / 2, W}, 1, -3.0, 3.0);
    const Tensor wq = Input({D}, 2, 0.5, 1.5), wk = Input({D}, 3, 0.5, 1.5);
    Tensor qkv = x.Clone();
    Tensor in = Tensor::Empty({N, normed * D}, DType::kF32);
    Tensor rstd = Tensor::Empty({N, normed}, DType::kF32);
    QkNormForward(qkv, H, Hkv, wq, wk, kEps, in, rstd);
    const Tensor d_wq = Dev(wq), d_wk = Dev(wk);
    Tensor d_qkv = Dev(x), d_in = DevEmpty({N, normed * D});
    Tensor d_rstd = F32({N, normed});
    QkNormForward(d_qkv, H, Hkv, d_wq, d_wk, kEps, d_in, d_rstd);
    ExpectClose(d_qkv, qkv, Tolerance(dtype(), 1e-5, kBf16Out), "out");
    const Tensor out = ToHost(d_qkv);
    int64_t changed = 0;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t c = normed * D; c < W; ++c) {
        changed += out.data<float>()[i * W + c] != x.data<float>()[i * W + c];
      }
    }
    EXPECT_EQ(changed, 0) << "value channels changed";
    ExpectClose(d_in, in, 0, "saved input");
    ExpectClose(d_rstd, rstd, 1e-5, "rstd");

    const Tensor dout = Input({2, N / 2, W}, 4);
    Tensor g = dout.Clone();
    Tensor dw = Tensor::Empty({2, D}, DType::kF32);
    QkNormBackward(g, H, Hkv, in, rstd, wq, wk, dw);
    Tensor d_g = Dev(dout);
    Tensor d_dw = Random({2, D}, 5).To(Gpu());  // garbage to overwrite
    QkNormBackward(d_g, H, Hkv, d_in, d_rstd, d_wq, d_wk, d_dw);
    ExpectClose(d_g, g, Tolerance(dtype(), 1e-5, kBf16Out), "dqkv");
    ExpectClose(d_dw, dw, 1e-5, "dw");
  }
}

TEST_P(CudaLlamaTest, SwiGlu) {
  const int64_t N = 70, F = 600;
  const Tensor gate_up = Input({N, 2 * F}, 1, -6.0, 6.0);
  Tensor out = Tensor::Empty({N, F}, DType::kF32);
  SwiGluForward(gate_up, out);
  const Tensor d_gate_up = Dev(gate_up);
  Tensor d_out = DevEmpty({N, F});
  SwiGluForward(d_gate_up, d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "out");

  const Tensor dout = Input({N, F}, 2);
  Tensor acc = Input({N, 2 * F}, 3);
  Tensor d_acc = Dev(acc);
  SwiGluBackward(gate_up, dout, acc);
  SwiGluBackward(d_gate_up, Dev(dout), d_acc);
  ExpectClose(d_acc, acc, Tolerance(dtype(), 1e-5, kBf16Out), "accumulate");
  Tensor written = Tensor::Empty({N, 2 * F}, DType::kF32);
  SwiGluBackwardWrite(gate_up, dout, written);
  Tensor d_written = Dev(Input({N, 2 * F}, 4));
  SwiGluBackwardWrite(d_gate_up, Dev(dout), d_written);
  ExpectClose(d_written, written, Tolerance(dtype(), 1e-5, kBf16Out), "write");
}

TEST_P(CudaLlamaTest, Rope) {
  const int64_t B = 2, T = 33, H = 8, Hkv = 2, D = 64;
  const int64_t W = (H + 2 * Hkv) * D;
  RopeScaling scaling;
  scaling.type = RopeScalingType::kLlama3;
  absl::StatusOr<RopeTables> tables =
      RopeTable(D, 2 * T, 500000, scaling, DType::kF32);
  ASSERT_TRUE(tables.ok()) << tables.status();
  const Tensor d_cos = tables->cos.To(Gpu()), d_sin = tables->sin.To(Gpu());
  const Tensor qkv = Input({B, T, W}, 1, -2.0, 2.0);
  Tensor x = qkv.Clone();
  RopeForward(x, H, Hkv, tables->cos, tables->sin);
  Tensor d_x = Dev(qkv);
  RopeForward(d_x, H, Hkv, d_cos, d_sin);
  ExpectClose(d_x, x, Tolerance(dtype(), 1e-6, kBf16Out), "forward");
  RopeBackward(x, H, Hkv, tables->cos, tables->sin);
  RopeBackward(d_x, H, Hkv, d_cos, d_sin);
  ExpectClose(d_x, x, Tolerance(dtype(), 1e-6, 2 * kBf16Out), "backward");
  ExpectClose(d_x, qkv, Tolerance(dtype(), 1e-6, 2 * kBf16Out), "identity");
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaLlamaTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

// ---- Grouped-query attention ----

struct GqaCase {
  int64_t B, T, H, Hkv, D;
  int64_t Width() const { return (H + 2 * Hkv) * D; }
};

// kernel_test::BandError over columns [begin, end) of each row of width W.
double ColumnsError(const Tensor& a, const Tensor& b, int64_t W, int64_t begin,
                    int64_t end) {
  return kernel_test::BandError(a, b, W, begin, end);
}

class CudaGqaTest
    : public ::testing::TestWithParam<std::tuple<DType, AttentionPath>> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }
  DType dtype() const { return std::get<0>(GetParam()); }
  AttentionPath path() const { return std::get<1>(GetParam()); }

  void Check(const GqaCase& c) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H="
                                    << c.H << " Hkv=" << c.Hkv << " D=" << c.D);
    const int64_t C = c.H * c.D;
    const Tensor qkv =
        cuda_test::Rounded(Random({c.B, c.T, c.Width()}, 1, -2, 2), dtype());
    const Tensor dout = cuda_test::Rounded(Random({c.B, c.T, C}, 2), dtype());
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kF32);
    Tensor probs = Tensor::Empty(
        AttentionSavedShape(Device::Cpu(), c.B, c.T, c.H), DType::kF32);
    AttentionForward(qkv, c.H, c.Hkv, out, probs);
    Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF32);
    AttentionBackward(dout, qkv, out, probs, c.H, c.Hkv, dqkv);

    const Tensor d_qkv = ToDevice(qkv, dtype());
    Tensor d_out = Tensor::Empty({c.B, c.T, C}, dtype(), Gpu());
    Tensor d_lse = Tensor::Empty(AttentionSavedShape(Gpu(), c.B, c.T, c.H),
                                 DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, c.Hkv, d_out, d_lse, path());
    ExpectClose(d_out, out, Tolerance(dtype(), 1e-4, 1e-2), "out");
    Tensor d_dqkv = Tensor::Zeros(qkv.shape(), dtype(), Gpu());
    AttentionBackward(ToDevice(dout, dtype()), d_qkv, d_out, d_lse, c.H, c.Hkv,
                      d_dqkv, path());
    const Tensor got = ToHost(d_dqkv);
    const int64_t W = c.Width(), kv = c.Hkv * c.D;
    EXPECT_LE(ColumnsError(got, dqkv, W, 0, C), Tolerance(dtype(), 1e-4, 2e-2))
        << "dQ";
    EXPECT_LE(ColumnsError(got, dqkv, W, C, C + kv),
              Tolerance(dtype(), 1e-4, 3e-2))
        << "dK";
    EXPECT_LE(ColumnsError(got, dqkv, W, C + kv, W),
              Tolerance(dtype(), 1e-4, 3e-2))
        << "dV";
  }
};

// kCudnn runs bfloat16 on cuDNN's grouped-query graphs where a plan builds
// and float32 as kMma does (CudaAttentionCudnnTest.RunsGroupedQueryAttention
// calls the cuDNN launchers directly, so that a fallback cannot hide);
// kMma takes bfloat16 at D = 64 and 128 on tensor cores, the rest on SIMT.
TEST_P(CudaGqaTest, AgreesWithCpu) {
  Check({2, 130, 4, 2, 64});   // groups of 2, ragged tiles
  Check({1, 200, 8, 1, 128});  // multi-query
  Check({2, 77, 6, 3, 48});    // SIMT everywhere (D = 48)
  Check({1, 1, 4, 2, 64});     // one token: the output is v
}

INSTANTIATE_TEST_SUITE_P(
    Paths, CudaGqaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(AttentionPath::kCudnn,
                                         AttentionPath::kMma,
                                         AttentionPath::kSimt)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == DType::kF32 ? "F32"
                                                                : "BF16") +
             std::string(AttentionPathName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace trellis
