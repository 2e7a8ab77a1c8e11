// Replicated pieces on a GPU: DeviceCopyRows (cudaMemcpy2D) moves a block
// of columns as the CPU loop does, and UnownedGradSquares of a device
// gradient equals the CPU's over whole and partial flat ranges.
#include <cstdint>
#include <utility>
#include <vector>

#include "framework/device_memory.h"
#include "gtest/gtest.h"
#include "parallel/replicas.h"
#include "tests/cuda/cuda_test_util.h"

namespace trellis {
namespace {

using cuda_test::Gpu;

TEST(CudaReplicasTest, CopyRowsMovesAColumnBlock) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  // Columns 3..7 of a (5, 11) matrix into columns 1..5 of a (5, 9) one.
  const Tensor src = cuda_test::Random({5, 11}, 7);
  Tensor want = Tensor::Zeros({5, 9}, DType::kF32);
  Tensor dst = want.To(Gpu());
  const Tensor src_gpu = src.To(Gpu());
  const size_t f = sizeof(float);
  DeviceCopyRows(want.data<float>() + 1, 9 * f, src.data<float>() + 3, 11 * f,
                 5 * f, 5, Device::Cpu());
  DeviceCopyRows(static_cast<float*>(dst.raw()) + 1, 9 * f,
                 static_cast<const float*>(src_gpu.raw()) + 3, 11 * f, 5 * f, 5,
                 Gpu());
  const Tensor got = dst.To(Device::Cpu());
  for (int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

TEST(CudaReplicasTest, UnownedSquaresMatchTheCpu) {
  TRELLIS_REQUIRE_CUDA_DEVICE();
  // [Q 16 | K 4 | V 4] over tp 4, K and V replicated over 2 ranks; rank 1
  // holds but does not own its K and V pieces.
  const ShardSpec spec =
      ShardSpec::SplitGroups({6, 24}, 1, 4, 1, {16, 4, 4}, {4, 2, 2});
  Parameter cpu, gpu;
  cpu.spec = gpu.spec = spec;
  cpu.grad = cuda_test::Random(spec.LocalShape(), 11);
  gpu.grad = cpu.grad.To(Gpu());
  const int64_t n = cpu.grad.numel();
  for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n}, {5, 30}, {13, 14}, {3, n - 2}, {20, 20}}) {
    const double want = UnownedGradSquares({{&cpu, begin, end}});
    const double got = UnownedGradSquares({{&gpu, begin, end}});
    EXPECT_NEAR(got, want, 1e-12 * (1 + want)) << begin << ".." << end;
    if (end - begin > 8) {
      EXPECT_GT(want, 0) << begin << ".." << end;
    }
  }
}

}  // namespace
}  // namespace trellis
