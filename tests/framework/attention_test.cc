#include "framework/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

  // GradWrite::kWrite ignores what was there (NaN here) and writes the
  // gradient itself: bit for bit the sum into zeros.
  Tensor written = Tensor::Empty(qkv.shape(), DType::kF64);
  written.Fill(std::nan(""));
  AttentionBackward(g, qkv, Tensor(), f.out, f.saved, d.H, d.H, written,
                    kDefaultAttentionPath, GradWrite::kWrite);
  for (int64_t i = 0; i < written.numel(); ++i) {
    ASSERT_EQ(Get(written, i), Get(dqkv1, i)) << "element " << i;
  }
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

// ---- Grouped-query attention: Hkv key/value heads, H / Hkv query heads
// each; qkv rows [H q heads | Hkv k heads | Hkv v heads] ----

struct GqaDims {
  int64_t B, T, H, Hkv, D;
  int64_t Width() const { return (H + 2 * Hkv) * D; }
  Dims Mha() const { return Dims{B, T, H, D}; }
};

// The multi-head qkv (B, T, 3·H·D) whose K and V heads repeat each
// key/value head of `gqa` for every query head of its group.
Tensor RepeatKv(const Tensor& gqa, const GqaDims& g) {
  const int64_t C = g.H * g.D, group = g.H / g.Hkv;
  Tensor mha = Tensor::Empty({g.B, g.T, 3 * C}, gqa.dtype());
  for (int64_t r = 0; r < g.B * g.T; ++r) {
    for (int64_t c = 0; c < C; ++c) {  // Q as is
      Set(mha, r * 3 * C + c, Get(gqa, r * g.Width() + c));
    }
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t kv = h / group;
      for (int64_t i = 0; i < g.D; ++i) {
        const int64_t src = r * g.Width() + C + kv * g.D + i;
        Set(mha, r * 3 * C + C + h * g.D + i, Get(gqa, src));
        Set(mha, r * 3 * C + 2 * C + h * g.D + i, Get(gqa, src + g.Hkv * g.D));
      }
    }
  }
  return mha;
}

// The gradient of the grouped qkv from that of the repeated one: dQ as is,
// a key/value head's dK, dV summed over its group.
Tensor SumKvGradients(const Tensor& dmha, const GqaDims& g) {
  const int64_t C = g.H * g.D, group = g.H / g.Hkv;
  Tensor out = Tensor::Zeros({g.B, g.T, g.Width()}, DType::kF64);
  for (int64_t r = 0; r < g.B * g.T; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      Set(out, r * g.Width() + c, Get(dmha, r * 3 * C + c));
    }
    for (int64_t h = 0; h < g.H; ++h) {
      for (int64_t i = 0; i < g.D; ++i) {
        const int64_t dst = r * g.Width() + C + h / group * g.D + i;
        Set(out, dst, Get(out, dst) + Get(dmha, r * 3 * C + C + h * g.D + i));
        const int64_t vdst = dst + g.Hkv * g.D;
        Set(out, vdst,
            Get(out, vdst) + Get(dmha, r * 3 * C + 2 * C + h * g.D + i));
      }
    }
  }
  return out;
}

Forward RunGqa(const Tensor& qkv, const GqaDims& g) {
  Forward f{Tensor::Empty({g.B, g.T, g.H * g.D}, qkv.dtype()),
            Tensor::Empty(AttentionSavedShape(Device::Cpu(), g.B, g.T, g.H),
                          qkv.dtype())};
  AttentionForward(qkv, g.H, g.Hkv, f.out, f.saved);
  return f;
}

class GqaTest : public ::testing::TestWithParam<GqaDims> {};

TEST_P(GqaTest, ForwardEqualsMhaOnRepeatedKv) {
  const GqaDims g = GetParam();
  const Tensor qkv = Random({g.B, g.T, g.Width()}, 1, DType::kF64, -2, 2);
  const Forward gqa = RunGqa(qkv, g);
  const Forward mha = RunAttention(RepeatKv(qkv, g), g.Mha());
  EXPECT_LT(RelError(gqa.out, mha.out), 1e-14);
  EXPECT_LT(RelError(gqa.saved, mha.saved), 1e-14);
}

TEST_P(GqaTest, BackwardEqualsSummedMhaGradients) {
  const GqaDims g = GetParam();
  const Tensor qkv = Random({g.B, g.T, g.Width()}, 1, DType::kF64, -2, 2);
  const Tensor dout = Random({g.B, g.T, g.H * g.D}, 2);
  const Forward gqa = RunGqa(qkv, g);
  Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF64);
  AttentionBackward(dout, qkv, gqa.out, gqa.saved, g.H, g.Hkv, dqkv);

  const Tensor mha_qkv = RepeatKv(qkv, g);
  const Forward mha = RunAttention(mha_qkv, g.Mha());
  Tensor dmha = Tensor::Zeros(mha_qkv.shape(), DType::kF64);
  AttentionBackward(dout, mha_qkv, mha.out, mha.saved, g.H, dmha);
  EXPECT_LT(RelError(dqkv, SumKvGradients(dmha, g)), 1e-13);

  // Accumulates: a second call adds the same again.
  const Tensor once = dqkv.Clone();
  AttentionBackward(dout, qkv, gqa.out, gqa.saved, g.H, g.Hkv, dqkv);
  EXPECT_LT(RelError(dqkv, Scaled(once, 2)), 1e-15);
}

TEST_P(GqaTest, BackwardMatchesFiniteDifferences) {
  GqaDims g = GetParam();
  g.T = std::min<int64_t>(g.T, 6);  // finite differences cost T² per element
  Tensor qkv = Random({g.B, g.T, g.Width()}, 1, DType::kF64, -1.5, 1.5);
  const Tensor dout = Random({g.B, g.T, g.H * g.D}, 2);
  const Forward f = RunGqa(qkv, g);
  Tensor dqkv = Tensor::Zeros(qkv.shape(), DType::kF64);
  AttentionBackward(dout, qkv, f.out, f.saved, g.H, g.Hkv, dqkv);
  auto loss = [&] { return Dot(RunGqa(qkv, g).out, dout); };
  EXPECT_LT(RelError(dqkv, NumericGradient(loss, qkv)), 1e-7);
}

// Groups of 2 and 4 (and multi-query, Hkv = 1); T = 70 spans three of the
// kernel's row blocks.
INSTANTIATE_TEST_SUITE_P(Shapes, GqaTest,
                         ::testing::Values(GqaDims{2, 5, 4, 2, 3},
                                           GqaDims{1, 70, 4, 1, 4},
                                           GqaDims{2, 37, 8, 2, 2}));

// The overloads without n_kv_head are the n_kv_head = n_head call.
TEST(AttentionTest, MhaOverloadsEqualEqualKvHeads) {
  const Dims d{2, 40, 3, 4};
  const Tensor qkv = Random({d.B, d.T, 3 * d.C()}, 1, DType::kF32);
  const Tensor dout = Random({d.B, d.T, d.C()}, 2, DType::kF32);
  const Forward a = RunAttention(qkv, d);
  const Forward b = RunGqa(qkv, GqaDims{d.B, d.T, d.H, d.H, d.D});
  ASSERT_EQ(std::memcmp(a.out.raw(), b.out.raw(), a.out.nbytes()), 0);
  Tensor da = Tensor::Zeros(qkv.shape(), DType::kF32);
  Tensor db = Tensor::Zeros(qkv.shape(), DType::kF32);
  AttentionBackward(dout, qkv, a.out, a.saved, d.H, da);
  AttentionBackward(dout, qkv, b.out, b.saved, d.H, d.H, db);
  EXPECT_EQ(std::memcmp(da.raw(), db.raw(), da.nbytes()), 0);
}

TEST(AttentionDeathTest, ChecksGroups) {
  const GqaDims g{1, 4, 3, 2, 2};  // 3 query heads do not split over 2
  Tensor qkv = Random({g.B, g.T, g.Width()}, 1);
  Tensor out = Tensor::Empty({g.B, g.T, g.H * g.D}, DType::kF64);
  Tensor saved = Tensor::Empty({g.B, g.H, g.T, g.T}, DType::kF64);
  EXPECT_DEATH(AttentionForward(qkv, g.H, g.Hkv, out, saved),
               "3 query heads in groups over 2");
  EXPECT_DEATH(AttentionForward(qkv, 4, 0, out, saved), "key/value heads");
}

}  // namespace
}  // namespace trellis
