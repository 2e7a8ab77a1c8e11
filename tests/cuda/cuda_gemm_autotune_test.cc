// The CUDA GEMMs with --gemm_autotune (framework/gemm_tuning.h): the first
// call of each problem times several cuBLASLt algorithms before it runs, and
// must still compute exactly one call's result. The fear is the timing runs
// leaking into the output: an accumulating GEMM (beta 1, C = D) added
// several times, or a bias gradient summed once per candidate. Each layer
// kind the model uses runs on shapes no other test uses (so its problems
// are new and get timed) and is checked against the CPU with the kernels'
// usual tolerances (float32 1e-5, GELU 1e-4, bfloat16 8e-3; the DGELU
// epilogue 1.6e-2), and a second call of each problem, now on its chosen
// algorithm, must agree with the first bit for bit.
#include <cstdint>
#include <cstring>

#include "framework/gemm_tuning.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/matmul.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::ExpectClose;
using cuda_test::Gpu;
using cuda_test::Tolerance;

constexpr double kBf16Out = 8e-3;

bool SameBits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.To(Device::Cpu()), hb = b.To(Device::Cpu());
  return ha.nbytes() == hb.nbytes() &&
         std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

class CudaGemmAutotuneTest : public cuda_test::DTypeTest {
 protected:
  void SetUp() override {
    cuda_test::DTypeTest::SetUp();
    if (IsSkipped()) return;
    SetGemmAutotune(true);
  }
  void TearDown() override { SetGemmAutotune(false); }
  // Distinct shapes per dtype, so that each parameter's problems are new.
  int64_t Rows() const { return dtype() == DType::kF32 ? 320 : 448; }
};

TEST_P(CudaGemmAutotuneTest, AccumulatingGradientsAddOnce) {
  const int64_t N = Rows(), K = 384, M = 256;
  const GemmTuningStats before = GemmTuningSoFar();
  const Tensor dout = Input({N, M}, 1), x = Input({N, K}, 2);
  const Tensor w = Input({K, M}, 3);
  const Tensor dw0 = cuda_test::Random({K, M}, 4);
  const Tensor db0 = cuda_test::Random({M}, 5);
  const Tensor dx0 = Input({N, K}, 6);

  Tensor dw = dw0.Clone(), db = db0.Clone();
  MatmulBackwardWeight(dout, x, dw, db);
  Tensor d_dw = dw0.To(Gpu()), d_db = db0.To(Gpu());
  MatmulBackwardWeight(Dev(dout), Dev(x), d_dw, d_db);
  ExpectClose(d_dw, dw, 1e-5, "dw");
  ExpectClose(d_db, db, 1e-5, "dbias");

  // dx (bfloat16 under bf16) += dout @ w^T, on the CPU from the rounded dx0.
  Tensor dx = dx0.Clone();
  MatmulBackwardInput(dout, w, dx);
  Tensor d_dx = Dev(dx0);
  MatmulBackwardInput(Dev(dout), Dev(w), d_dx);
  ExpectClose(d_dx, dx, Tolerance(dtype(), 1e-5, kBf16Out), "dx");

  // The same problems again, on the algorithms chosen: the same sums.
  Tensor again_dw = dw0.To(Gpu()), again_db = db0.To(Gpu());
  MatmulBackwardWeight(Dev(dout), Dev(x), again_dw, again_db);
  EXPECT_TRUE(SameBits(again_dw, d_dw));
  EXPECT_TRUE(SameBits(again_db, d_db));
  EXPECT_GT(GemmTuningSoFar().problems, before.problems)
      << "no problem was timed: cuBLASLt named one candidate for each";
}

TEST_P(CudaGemmAutotuneTest, EpilogueLayersMatchCpu) {
  const int64_t N = Rows() + 64, K = 256, M = 512;
  const Tensor x = Input({N, K}, 11), w = Input({K, M}, 12);
  const Tensor bias = Input({M}, 13);
  const Tensor residual = Input({N, M}, 14, -4.0, 4.0);

  // The residual as C, apart from D.
  Tensor out = Tensor::Empty({N, M}, DType::kF32);
  MatmulForward(x, w, bias, out);
  Add(out, residual, out);
  const Tensor d_residual = Dev(residual);
  Tensor d_out = DevEmpty({N, M});
  MatmulForwardResidual(Dev(x), Dev(w), Dev(bias), d_residual, d_out);
  ExpectClose(d_out, out, Tolerance(dtype(), 1e-5, kBf16Out), "residual out");
  ExpectClose(d_residual, residual, 0.0, "residual read, not written");

  // GELU in the epilogue, its input kept as the aux output.
  Tensor pre = Tensor::Empty({N, M}, DType::kF32);
  Tensor gelu = Tensor::Empty({N, M}, DType::kF32);
  MatmulForwardGelu(x, w, bias, pre, gelu);
  Tensor d_pre = DevEmpty({N, M}), d_gelu = DevEmpty({N, M});
  MatmulForwardGelu(Dev(x), Dev(w), Dev(bias), d_pre, d_gelu);
  ExpectClose(d_pre, pre, Tolerance(dtype(), 1e-5, kBf16Out), "pre_gelu");
  ExpectClose(d_gelu, gelu, Tolerance(dtype(), 1e-4, kBf16Out), "gelu");

  // DGELU reading the aux input, overwriting dpre.
  const Tensor dout = Input({N, M}, 15);
  const Tensor w2 = Input({K, M}, 16);
  const Tensor pre2 = Input({N, K}, 17, -3, 3);
  Tensor dpre = Tensor::Empty({N, K}, DType::kF32);
  MatmulBackwardInputGelu(dout, w2, pre2, dpre);
  Tensor d_dpre = DevEmpty({N, K});
  MatmulBackwardInputGelu(Dev(dout), Dev(w2), Dev(pre2), d_dpre);
  ExpectClose(d_dpre, dpre, Tolerance(dtype(), 1e-4, 1.6e-2), "dpre");
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaGemmAutotuneTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         cuda_test::DTypeParamName);

}  // namespace
}  // namespace trellis
