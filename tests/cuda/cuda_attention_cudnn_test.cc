// Every CUDA attention path (AttentionPath: cudnn, mma, simt) against the
// CPU kernel at T = 1, 77, 1024, 2048 and head widths 64 and 128, in
// bfloat16 and float32: the output, the saved row log-sum-exps and each of
// dQ, dK, dV. The cudnn path on bfloat16 must really run cuDNN on a GPU of
// compute capability 8.0 or newer (checked through the launcher itself, not
// only the results), but for one token, whose backward cuDNN refuses; on
// float32 it falls back (cuDNN's fused attention is float16/bfloat16 only),
// so that case checks the fallback.
//
// Tolerances, max |a - b| / max |b| per tensor (dQ, dK, dV each against its
// own scale):
//   bfloat16, every path: output 1e-2, dQ/dK/dV 2e-2 (P and dS rounded to
//     bfloat16 before the tensor-core products, outputs and gradients
//     rounded to bfloat16, dO·O read from the rounded output);
//   float32 (SIMT kernels): output and gradients 1e-4;
//   row log-sum-exps against a float64 reference on the same rounded
//     inputs: 1e-5 of max(1, |lse|) for mma and simt (float32 throughout),
//     1e-4 for cuDNN (its exponentials and logarithms may use the fast
//     hardware approximations).
// Backward adds onto dqkv on every path: a second backward onto the result
// must give twice the gradient (2e-2 in bfloat16, 1e-4 in float32). With
// GradWrite::kWrite it overwrites a NaN-filled dqkv: every element finite and
// within the same tolerances of the CPU gradient.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/cuda/attention_cudnn.h"
#include "framework/kernels/attention.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::Gpu;
using cuda_test::Random;
using cuda_test::Rounded;
using cuda_test::ToDevice;
using cuda_test::ToHost;

using Case = cuda_test::AttentionCase;
using cuda_test::ReferenceLse;

// Whether the current device can run cuDNN's fused attention at all.
bool CudnnCapableDevice() {
  const absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok() || *devices == 0) return false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) !=
      cudaSuccess) {
    return false;
  }
  return major >= 8;
}

// kernel_test::BandError over columns [part·C, (part + 1)·C) of
// (B, T, 3C) float32 CPU tensors: part 0 is dQ, 1 dK, 2 dV.
double PartError(const Tensor& a, const Tensor& b, int64_t C, int part,
                 double scale_a = 1.0) {
  return kernel_test::BandError(a, b, 3 * C, part * C, (part + 1) * C, scale_a);
}

class CudaAttentionPathsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }
  DType dtype() const { return GetParam(); }
  bool bf16() const { return dtype() == DType::kBF16; }

  // The CPU reference once, then every path against it.
  void Check(const Case& c) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T
                                    << " H=" << c.H << " D=" << c.D);
    const int64_t C = c.H * c.D;
    const Tensor qkv = Rounded(Random({c.B, c.T, 3 * C}, 21, -2, 2), dtype());
    const Tensor dout = Rounded(Random({c.B, c.T, C}, 22), dtype());
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kF32);
    Tensor probs = Tensor::Empty(
        AttentionSavedShape(Device::Cpu(), c.B, c.T, c.H), DType::kF32);
    AttentionForward(qkv, c.H, out, probs);
    Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF32);
    AttentionBackward(dout, qkv, out, probs, c.H, dqkv);
    std::vector<double> lse(c.B * c.H * c.T);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t t = 0; t < c.T; ++t) {
          lse[(b * c.H + h) * c.T + t] = ReferenceLse(qkv, c, b, h, t);
        }
      }
    }
    for (AttentionPath path :
         {AttentionPath::kCudnn, AttentionPath::kMma, AttentionPath::kSimt}) {
      SCOPED_TRACE(AttentionPathName(path));
      CheckPath(path, c, qkv, dout, out, dqkv, lse);
    }
  }

  void CheckPath(AttentionPath path, const Case& c, const Tensor& qkv,
                 const Tensor& dout, const Tensor& out, const Tensor& dqkv,
                 const std::vector<double>& lse) {
    const int64_t C = c.H * c.D;
    const double out_tol = bf16() ? 1e-2 : 1e-4;
    const double grad_tol = bf16() ? 2e-2 : 1e-4;
    const double lse_tol =
        path == AttentionPath::kCudnn && bf16() ? 1e-4 : 1e-5;
    const Tensor d_qkv = ToDevice(qkv, dtype());
    Tensor d_out = Tensor::Empty({c.B, c.T, C}, dtype(), Gpu());
    Tensor d_lse = Tensor::Empty({c.B, c.H, c.T}, DType::kF32, Gpu());
    AttentionForward(d_qkv, c.H, d_out, d_lse, path);
    EXPECT_LE(kernel_test::RelError(ToHost(d_out), out), out_tol) << "out";
    const Tensor host_lse = ToHost(d_lse);
    for (int64_t i = 0; i < host_lse.numel(); ++i) {
      ASSERT_NEAR(host_lse.data<float>()[i], lse[i],
                  lse_tol * std::max(1.0, std::abs(lse[i])))
          << "lse " << i;
    }
    Tensor d_dqkv = Tensor::Zeros(qkv.shape(), dtype(), Gpu());
    const Tensor d_dout = ToDevice(dout, dtype());
    AttentionBackward(d_dout, d_qkv, d_out, d_lse, c.H, d_dqkv, path);
    const Tensor once = ToHost(d_dqkv);
    AttentionBackward(d_dout, d_qkv, d_out, d_lse, c.H, d_dqkv, path);
    const Tensor twice = ToHost(d_dqkv);
    Tensor d_written = Tensor::Empty(qkv.shape(), dtype(), Gpu());
    d_written.Fill(std::nan(""));
    AttentionBackward(d_dout, d_qkv, Tensor(), d_out, d_lse, c.H, c.H,
                      d_written, path, GradWrite::kWrite);
    const Tensor written = ToHost(d_written);
    for (int64_t i = 0; i < written.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(written.data<float>()[i]))
          << "written element " << i;
    }
    const char* names[] = {"dQ", "dK", "dV"};
    for (int part = 0; part < 3; ++part) {
      EXPECT_LE(PartError(once, dqkv, C, part), grad_tol) << names[part];
      // Backward added onto what was there: twice the gradient.
      EXPECT_LE(PartError(twice, once, C, part, 0.5), grad_tol)
          << names[part] << " accumulated";
      EXPECT_LE(PartError(written, dqkv, C, part), grad_tol)
          << names[part] << " written";
    }
  }
};

TEST_P(CudaAttentionPathsTest, ShortSequences) {
  for (int64_t D : {64, 128}) {
    Check({2, 1, 2, D});   // one token: the output is v
    Check({2, 77, 3, D});  // T not a multiple of any tile
  }
}

TEST_P(CudaAttentionPathsTest, LongSequences) {
  for (int64_t D : {64, 128}) {
    Check({1, 1024, 2, D});
    Check({1, 2048, 2, D});
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaAttentionPathsTest,
                         ::testing::Values(DType::kBF16, DType::kF32),
                         cuda_test::DTypeParamName);

class CudaAttentionCudnnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TRELLIS_REQUIRE_CUDA_DEVICE();
    if (!CudnnCapableDevice()) {
      GTEST_SKIP() << "no CUDA device of compute capability 8.0 or newer "
                      "(cuDNN's fused attention needs one)";
    }
  }

  // Runs forward and backward of `c` on the cuDNN launchers directly, so
  // that a fallback cannot hide: each must take the call.
  static void RunDirect(const Case& c) {
    const int64_t C = c.H * c.D;
    Tensor qkv = ToDevice(Random({c.B, c.T, 3 * C}, 31), DType::kBF16);
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kBF16, Gpu());
    Tensor lse = Tensor::Empty({c.B, c.H, c.T}, DType::kF32, Gpu());
    Tensor dout = ToDevice(Random({c.B, c.T, C}, 32), DType::kBF16);
    Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kBF16, Gpu());
    const cuda_launch::AttentionDims d{c.B, c.T, c.H, c.D};
    const absl::Status forward = cuda_internal::CudnnAttentionForward(
        cuda_launch::Elem::kBF16, d, qkv.raw(), out.raw(), lse.data<float>());
    ASSERT_TRUE(forward.ok()) << forward;
    const absl::Status backward = cuda_internal::CudnnAttentionBackward(
        cuda_launch::Elem::kBF16, d, dout.raw(), qkv.raw(), out.raw(),
        lse.data<float>(), dqkv.raw());
    ASSERT_TRUE(backward.ok()) << backward;
    CudaSynchronize(0);
  }
};

// One token is refused by cuDNN's backward (RefusesOneTokenBackward), so it
// falls back there; every other tested shape must build both plans.
TEST_F(CudaAttentionCudnnTest, BuildsPlansForEveryTestedShape) {
  for (int64_t D : {64, 128}) {
    for (int64_t T : {77, 1024, 2048}) {
      SCOPED_TRACE(testing::Message() << "T=" << T << " D=" << D);
      RunDirect({1, T, 2, D});
    }
  }
}

TEST_F(CudaAttentionCudnnTest, CachesPlansPerShapeAndPass) {
  const int64_t start = cuda_internal::CudnnAttentionPlanBuilds();
  RunDirect({2, 96, 2, 64});  // a shape no other test uses: two new plans
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start + 2);
  RunDirect({2, 96, 2, 64});  // both reused
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start + 2);
  RunDirect({2, 97, 2, 64});  // another T: two more
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start + 4);
  RunDirect({2, 96, 2, 64});  // the first shape is still cached
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start + 4);
}

TEST_F(CudaAttentionCudnnTest, RefusesFloat32WithAReason) {
  const cuda_launch::AttentionDims d{1, 8, 1, 64};
  Tensor qkv = Tensor::Zeros({1, 8, 3 * 64}, DType::kF32, Gpu());
  Tensor out = Tensor::Empty({1, 8, 64}, DType::kF32, Gpu());
  Tensor lse = Tensor::Empty({1, 1, 8}, DType::kF32, Gpu());
  const int64_t start = cuda_internal::CudnnAttentionPlanBuilds();
  const absl::Status status = cuda_internal::CudnnAttentionForward(
      cuda_launch::Elem::kF32, d, qkv.raw(), out.raw(), lse.data<float>());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(status.message()).find("float32"), std::string::npos)
      << status;
  // Refused before any graph was built.
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start);
}

TEST_F(CudaAttentionCudnnTest, RefusesOneTokenBackwardWithAReason) {
  const cuda_launch::AttentionDims d{2, 1, 2, 64};
  Tensor qkv = Tensor::Zeros({2, 1, 3 * 128}, DType::kBF16, Gpu());
  Tensor out = Tensor::Zeros({2, 1, 128}, DType::kBF16, Gpu());
  Tensor lse = Tensor::Zeros({2, 2, 1}, DType::kF32, Gpu());
  Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kBF16, Gpu());
  const int64_t start = cuda_internal::CudnnAttentionPlanBuilds();
  const absl::Status status = cuda_internal::CudnnAttentionBackward(
      cuda_launch::Elem::kBF16, d, out.raw(), qkv.raw(), out.raw(),
      lse.data<float>(), dqkv.raw());
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(status.message()).find("one token"), std::string::npos)
      << status;
  EXPECT_EQ(cuda_internal::CudnnAttentionPlanBuilds(), start);
}

// kernel_test::BandError over columns [begin, end) of each row of width W
// (float32 CPU tensors).
double ColumnsError(const Tensor& a, const Tensor& b, int64_t W, int64_t begin,
                    int64_t end) {
  return kernel_test::BandError(a, b, W, begin, end);
}

// Grouped-query attention (Hkv < H) through the cuDNN launchers directly,
// so that a fallback cannot hide, against the CPU kernel: output 1e-2, dQ
// 2e-2, dK and dV (sums over a group) 3e-2; row log-sum-exps 1e-4.
TEST_F(CudaAttentionCudnnTest, RunsGroupedQueryAttention) {
  struct GqaCase {
    int64_t B, T, H, Hkv, D;
  };
  for (const GqaCase c : {GqaCase{2, 77, 4, 2, 64}, GqaCase{1, 256, 8, 1, 128},
                          GqaCase{1, 1024, 8, 2, 64}}) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H="
                                    << c.H << " Hkv=" << c.Hkv << " D=" << c.D);
    const int64_t C = c.H * c.D, W = (c.H + 2 * c.Hkv) * c.D;
    const Tensor qkv = Rounded(Random({c.B, c.T, W}, 41, -2, 2), DType::kBF16);
    const Tensor dout = Rounded(Random({c.B, c.T, C}, 42), DType::kBF16);
    Tensor out = Tensor::Empty({c.B, c.T, C}, DType::kF32);
    Tensor probs = Tensor::Empty(
        AttentionSavedShape(Device::Cpu(), c.B, c.T, c.H), DType::kF32);
    AttentionForward(qkv, c.H, c.Hkv, out, probs);
    Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF32);
    AttentionBackward(dout, qkv, out, probs, c.H, c.Hkv, dqkv);

    const Tensor d_qkv = ToDevice(qkv, DType::kBF16);
    Tensor d_out = Tensor::Empty({c.B, c.T, C}, DType::kBF16, Gpu());
    Tensor d_lse = Tensor::Empty({c.B, c.H, c.T}, DType::kF32, Gpu());
    Tensor d_dqkv = Tensor::Zeros(qkv.shape(), DType::kBF16, Gpu());
    const cuda_launch::AttentionDims d{c.B, c.T, c.H, c.D, c.Hkv};
    const absl::Status forward = cuda_internal::CudnnAttentionForward(
        cuda_launch::Elem::kBF16, d, d_qkv.raw(), d_out.raw(),
        d_lse.data<float>());
    ASSERT_TRUE(forward.ok()) << forward;
    const Tensor d_dout = ToDevice(dout, DType::kBF16);
    const absl::Status backward = cuda_internal::CudnnAttentionBackward(
        cuda_launch::Elem::kBF16, d, d_dout.raw(), d_qkv.raw(), d_out.raw(),
        d_lse.data<float>(), d_dqkv.raw());
    ASSERT_TRUE(backward.ok()) << backward;

    EXPECT_LE(kernel_test::RelError(ToHost(d_out), out), 1e-2) << "out";
    const Tensor lse = ToHost(d_lse);
    const float* p = probs.data<float>();
    for (int64_t row = 0; row < c.B * c.H * c.T; row += 7) {
      // The CPU saves probabilities: lse = s_tt - log p_tt on the diagonal.
      const int64_t t = row % c.T, bh = row / c.T;
      const int64_t b = bh / c.H, h = bh % c.H;
      const float* q = qkv.data<float>() + (b * c.T + t) * W + h * c.D;
      const float* k =
          qkv.data<float>() + (b * c.T + t) * W + C + h / (c.H / c.Hkv) * c.D;
      double s = 0;
      for (int64_t i = 0; i < c.D; ++i) s += double{q[i]} * k[i];
      s /= std::sqrt(static_cast<double>(c.D));
      const double expected = s - std::log(double{p[row * c.T + t]});
      EXPECT_NEAR(lse.data<float>()[row], expected,
                  1e-4 * std::max(1.0, std::abs(expected)))
          << "lse row " << row;
    }
    const Tensor got = ToHost(d_dqkv);
    const int64_t kv = c.Hkv * c.D;
    EXPECT_LE(ColumnsError(got, dqkv, W, 0, C), 2e-2) << "dQ";
    EXPECT_LE(ColumnsError(got, dqkv, W, C, C + kv), 3e-2) << "dK";
    EXPECT_LE(ColumnsError(got, dqkv, W, C + kv, W), 3e-2) << "dV";
  }
}

}  // namespace
}  // namespace trellis
