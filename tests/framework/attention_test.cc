#include "framework/kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Cast;
using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;
using kernel_test::Scaled;
using kernel_test::Set;

struct Dims {
  int64_t B, T, H, D;
  int64_t C() const { return H * D; }
};

struct Forward {
  Tensor out;    // (B, T, C)
  Tensor saved;  // (B, H, T, T)
};

Forward RunAttention(const Tensor& qkv, const Dims& d) {
  Forward f{Tensor::Empty({d.B, d.T, d.C()}, qkv.dtype()),
            Tensor::Empty(AttentionSavedShape(Device::Cpu(), d.B, d.T, d.H),
                          qkv.dtype())};
  AttentionForward(qkv, d.H, f.out, f.saved);
  return f;
}

// Straight from the definition, one query at a time.
Forward Naive(const Tensor& qkv, const Dims& d) {
  const int64_t C = d.C();
  Forward f{Tensor::Zeros({d.B, d.T, C}, DType::kF64),
            Tensor::Zeros({d.B, d.H, d.T, d.T}, DType::kF64)};
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return Get(qkv, (b * d.T + t) * 3 * C + part * C + h * d.D + i);
  };
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      for (int64_t t = 0; t < d.T; ++t) {
        std::vector<double> p(t + 1);
        double sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double score = 0;
          for (int64_t i = 0; i < d.D; ++i) {
            score += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          }
          p[s] = std::exp(score / std::sqrt(static_cast<double>(d.D)));
          sum += p[s];
        }
        for (int64_t s = 0; s <= t; ++s) {
          p[s] /= sum;
          Set(f.saved, ((b * d.H + h) * d.T + t) * d.T + s, p[s]);
          for (int64_t i = 0; i < d.D; ++i) {
            const int64_t o = (b * d.T + t) * C + h * d.D + i;
            Set(f.out, o, Get(f.out, o) + p[s] * at(b, s, 2, h, i));
          }
        }
      }
    }
  }
  return f;
}

// T = 150 spans five 32-row blocks of the kernel, the last one ragged.
TEST(AttentionTest, ForwardMatchesNaive) {
  const Dims d{2, 150, 2, 3};
  Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1, DType::kF64, -2, 2);
  Forward f = RunAttention(qkv, d), naive = Naive(qkv, d);
  EXPECT_LT(RelError(f.out, naive.out), 1e-13);
  EXPECT_LT(RelError(f.saved, naive.saved), 1e-13);  // zeros above diagonal
}

TEST(AttentionTest, SavedShapeDependsOnDevice) {
  EXPECT_EQ(AttentionSavedShape(Device::Cpu(), 2, 5, 3), (Shape{2, 3, 5, 5}));
  EXPECT_EQ(AttentionSavedShape(Device::Cuda(0), 2, 5, 3), (Shape{2, 3, 5}));
}

void CheckGradients(const Dims& d) {
  Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1, DType::kF64, -1.5, 1.5);
  Tensor g = Random({d.B, d.T, d.C()}, 2);
  Forward f = RunAttention(qkv, d);
  Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF64);
  AttentionBackward(g, qkv, f.out, f.saved, d.H, dqkv);
  auto loss = [&] { return Dot(RunAttention(qkv, d).out, g); };
  EXPECT_LT(RelError(dqkv, NumericGradient(loss, qkv)), 1e-7);

  Tensor dqkv1 = dqkv.Clone();
  AttentionBackward(g, qkv, f.out, f.saved, d.H, dqkv);
  EXPECT_LT(RelError(dqkv, Scaled(dqkv1, 2)), 1e-15);
}

TEST(AttentionTest, BackwardMatchesFiniteDifferences) {
  CheckGradients(Dims{2, 5, 3, 2});
}

// Three row blocks (32 + 32 + 6 rows), so the blocked products are covered.
TEST(AttentionTest, BackwardMatchesFiniteDifferencesAcrossBlocks) {
  CheckGradients(Dims{1, 70, 2, 3});
}

// Changing token t0's query, key and value leaves every output before t0
// bit for bit unchanged, and changes the output at t0.
TEST(AttentionTest, IsCausal) {
  const Dims d{2, 80, 2, 4};
  const int64_t t0 = 67;
  Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1);
  Forward before = RunAttention(qkv, d);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t c = 0; c < 3 * d.C(); ++c) {
      const int64_t i = (b * d.T + t0) * 3 * d.C() + c;
      Set(qkv, i, Get(qkv, i) + 0.5);
    }
  }
  Forward after = RunAttention(qkv, d);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t t = 0; t < d.T; ++t) {
      for (int64_t c = 0; c < d.C(); ++c) {
        const int64_t i = (b * d.T + t) * d.C() + c;
        if (t < t0) {
          ASSERT_EQ(Get(after.out, i), Get(before.out, i)) << b << " " << t;
        } else if (t == t0) {
          EXPECT_NE(Get(after.out, i), Get(before.out, i)) << b << " " << t;
        }
      }
    }
  }
}

TEST(AttentionTest, Float32MatchesFloat64) {
  const Dims d{2, 90, 3, 8};
  Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1, DType::kF64, -2, 2);
  Tensor g = Random({d.B, d.T, d.C()}, 2);
  Tensor qkv32 = Cast(qkv, DType::kF32), g32 = Cast(g, DType::kF32);
  Forward f64 = RunAttention(qkv, d), f32 = RunAttention(qkv32, d);
  EXPECT_LT(RelError(f32.out, f64.out), 1e-6);
  EXPECT_LT(RelError(f32.saved, f64.saved), 1e-6);
  Tensor d64 = Tensor::Zeros(qkv.shape(), DType::kF64);
  Tensor d32 = Tensor::Zeros(qkv.shape(), DType::kF32);
  AttentionBackward(g, qkv, f64.out, f64.saved, d.H, d64);
  AttentionBackward(g32, qkv32, f32.out, f32.saved, d.H, d32);
  EXPECT_LT(RelError(d32, d64), 1e-5);
}

TEST(AttentionDeathTest, ChecksShapes) {
  const Dims d{1, 4, 2, 3};
  Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1);
  Tensor out = Tensor::Empty({d.B, d.T, d.C()}, DType::kF64);
  Tensor saved = Tensor::Empty({d.B, d.H, d.T}, DType::kF64);  // CUDA's shape
  EXPECT_DEATH(AttentionForward(qkv, d.H, out, saved), "saved");
  Tensor saved_ok = Tensor::Empty({d.B, d.H, d.T, d.T}, DType::kF64);
  EXPECT_DEATH(AttentionForward(qkv, 4, out, saved_ok), "4 heads");
}

}  // namespace
}  // namespace trellis
