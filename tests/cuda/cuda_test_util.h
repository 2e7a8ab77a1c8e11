// Helpers shared by the CUDA tests: skipping without a device, moving random
// CPU tensors to the device in float32 or bfloat16 and back, and the
// tolerances the tests use.
//
// Every CUDA kernel is checked against its CPU twin (the reference). For
// bfloat16 the CPU reference runs on the same bfloat16-rounded inputs (seen
// as float32), so the difference measures the kernel: float32 arithmetic
// plus the final rounding of its bfloat16 outputs (a relative step of 2^-8,
// 0.39%, per element). Errors are max |a - b| / max |b| over a tensor
// (kernel_test::RelError).
#ifndef TRELLIS_TESTS_CUDA_CUDA_TEST_UTIL_H_
#define TRELLIS_TESTS_CUDA_CUDA_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/tensor.h"
#include "gtest/gtest.h"
#include "tests/framework/kernel_test_util.h"

// Skips the test when no CUDA device is visible and none is expected;
// fails it, naming the CUDA error and the driver and runtime versions, when
// a GPU is expected (/dev/nvidia*, TRELLIS_REQUIRE_GPU=1) but CUDA finds
// none (CudaDeviceCount). Usable in TEST bodies and SetUp().
#define TRELLIS_REQUIRE_CUDA_DEVICE()                                 \
  do {                                                                \
    const ::absl::StatusOr<int> trellis_cuda_devices =                \
        ::trellis::CudaDeviceCount();                                 \
    ASSERT_TRUE(trellis_cuda_devices.ok())                            \
        << trellis_cuda_devices.status().message();                   \
    if (*trellis_cuda_devices == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace trellis {
namespace cuda_test {

inline Device Gpu() { return Device::Cuda(0); }

// Uniform values in [lo, hi), float32, on the CPU.
inline Tensor Random(Shape shape, uint64_t seed, double lo = -1.0,
                     double hi = 1.0) {
  return kernel_test::Random(std::move(shape), seed, DType::kF32, lo, hi);
}

// A device copy of a float32 CPU tensor, in `dtype` (float32 or bfloat16).
inline Tensor ToDevice(const Tensor& cpu, DType dtype) {
  Tensor f32 = cpu.To(Gpu());
  if (dtype == DType::kF32) return f32;
  Tensor out = Tensor::Empty(cpu.shape(), dtype, Gpu());
  cuda::Convert(f32, out);
  return out;
}

// A float32 CPU copy of a float32 or bfloat16 device tensor.
inline Tensor ToHost(const Tensor& device) {
  if (device.dtype() == DType::kF32) return device.To(Device::Cpu());
  Tensor f32 = Tensor::Empty(device.shape(), DType::kF32, device.device());
  cuda::Convert(device, f32);
  return f32.To(Device::Cpu());
}

// `cpu` rounded through `dtype` and back: the values a kernel of that dtype
// sees.
inline Tensor Rounded(const Tensor& cpu, DType dtype) {
  return dtype == DType::kF32 ? cpu.Clone() : ToHost(ToDevice(cpu, dtype));
}

// f32_tol for float32 kernels, bf16_tol for bfloat16 ones.
inline double Tolerance(DType dtype, double f32_tol, double bf16_tol) {
  return dtype == DType::kF32 ? f32_tol : bf16_tol;
}

inline std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return info.param == DType::kF32 ? "F32" : "BF16";
}

// Expects `device` (on the GPU) to match `reference` (float32, CPU) within
// `tolerance`, naming `what` on failure.
inline void ExpectClose(const Tensor& device, const Tensor& reference,
                        double tolerance, const std::string& what) {
  const Tensor host = ToHost(device);
  ASSERT_EQ(host.shape(), reference.shape()) << what;
  EXPECT_LE(kernel_test::RelError(host, reference), tolerance) << what;
}

// A test run once per dtype (float32, bfloat16): inputs drawn on the CPU
// already rounded to the dtype, and device tensors of it.
class DTypeTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { TRELLIS_REQUIRE_CUDA_DEVICE(); }
  DType dtype() const { return GetParam(); }
  Tensor Input(Shape shape, uint64_t seed, double lo = -1, double hi = 1) {
    return Rounded(Random(std::move(shape), seed, lo, hi), dtype());
  }
  Tensor Dev(const Tensor& cpu) { return ToDevice(cpu, dtype()); }
  Tensor DevEmpty(Shape shape) { return Tensor::Empty(shape, dtype(), Gpu()); }
  Tensor F32(Shape shape) { return Tensor::Empty(shape, DType::kF32, Gpu()); }
};

// One causal attention problem: batch, sequence, heads, head width.
struct AttentionCase {
  int64_t B, T, H, D;
};

// log Σ_{j <= t} exp(q_t · k_j / sqrt(D)) for one (b, h, t) of a packed
// (B, T, 3·H·D) float32 CPU qkv, in float64: the row log-sum-exp every
// attention path saves.
inline double ReferenceLse(const Tensor& qkv, const AttentionCase& c, int64_t b,
                           int64_t h, int64_t t) {
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

}  // namespace cuda_test
}  // namespace trellis

#endif  // TRELLIS_TESTS_CUDA_CUDA_TEST_UTIL_H_
