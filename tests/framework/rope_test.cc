#include "framework/kernels/rope.h"

#include <gtest/gtest.h>

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

RopeScaling Llama3() {
  RopeScaling s;
  s.type = RopeScalingType::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  return s;
}

RopeTables Tables(int64_t D, int64_t T, DType dtype,
                  const RopeScaling& scaling = {}, double theta = 10000) {
  absl::StatusOr<RopeTables> tables = RopeTable(D, T, theta, scaling, dtype);
  EXPECT_TRUE(tables.ok()) << tables.status();
  return *std::move(tables);
}

TEST(RopeTableTest, MatchesTheFormula) {
  const int64_t D = 16, T = 50;
  const RopeTables f64 = Tables(D, T, DType::kF64);
  const RopeTables f32 = Tables(D, T, DType::kF32);
  ASSERT_EQ(f64.cos.shape(), (Shape{T, D / 2}));
  ASSERT_EQ(f32.sin.shape(), (Shape{T, D / 2}));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / D);
      const int64_t at = t * D / 2 + i;
      EXPECT_NEAR(Get(f64.cos, at), std::cos(angle), 1e-14) << t << " " << i;
      EXPECT_NEAR(Get(f64.sin, at), std::sin(angle), 1e-14) << t << " " << i;
      EXPECT_EQ(Get(f32.cos, at), static_cast<float>(std::cos(angle)));
      EXPECT_EQ(Get(f32.sin, at), static_cast<float>(std::sin(angle)));
    }
  }
}

// Llama 3.1's scaling (theta 500000, D 128, factor 8, low 1, high 4,
// original context 8192): the wavelength bounds are 8192 / 1 = 8192 and
// 8192 / 4 = 2048, and inv_freq[i] = 500000^(-i/64).
TEST(RopeTableTest, Llama3ScalingByHand) {
  absl::StatusOr<std::vector<double>> inv =
      RopeInverseFrequencies(128, 500000, Llama3());
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->size(), 64u);
  // i = 0: 1, wavelength 2π < 2048, unchanged.
  EXPECT_DOUBLE_EQ((*inv)[0], 1.0);
  // i = 28: 0.0032114459947525913, wavelength 1956.5 < 2048: unchanged.
  EXPECT_NEAR((*inv)[28], 0.0032114459947525913, 1e-17);
  // i = 32: 1/sqrt(500000) = 0.001414213562373095, wavelength 4442.883 in
  // [2048, 8192]: smooth = (8192 / 4442.883 - 1) / 3 = 0.2812862, and
  // (1 - smooth) · inv / 8 + smooth · inv = 0.371126 · inv.
  EXPECT_NEAR((*inv)[32], 5.248461609929547e-4, 1e-16);
  // i = 35: 0.0007644969883171747, wavelength 8218.7 > 8192: divided by 8.
  EXPECT_NEAR((*inv)[35], 9.556212353964683e-05, 1e-18);
  // i = 63: 2.455140791131609e-06, wavelength 2.56e6: divided by 8.
  EXPECT_NEAR((*inv)[63], 3.068925988914511e-07, 1e-20);

  // The table's angles are t · inv_freq.
  const RopeTables tables =
      Tables(128, 1001, DType::kF64, Llama3(), /*theta=*/500000);
  EXPECT_NEAR(Get(tables.cos, 1000 * 64 + 32),
              std::cos(1000 * 5.248461609929547e-4), 1e-13);
  EXPECT_NEAR(Get(tables.sin, 1000 * 64 + 63),
              std::sin(1000 * 3.068925988914511e-07), 1e-15);
}

TEST(RopeTableTest, RejectsBadArguments) {
  EXPECT_FALSE(RopeTable(7, 4, 10000, {}, DType::kF32).ok());
  EXPECT_FALSE(RopeTable(0, 4, 10000, {}, DType::kF32).ok());
  EXPECT_FALSE(RopeTable(8, -1, 10000, {}, DType::kF32).ok());
  EXPECT_FALSE(RopeTable(8, 4, 0, {}, DType::kF32).ok());
  EXPECT_FALSE(RopeTable(8, 4, 10000, {}, DType::kI32).ok());
  RopeScaling bad = Llama3();
  bad.high_freq_factor = bad.low_freq_factor;
  const absl::StatusOr<RopeTables> t = RopeTable(8, 4, 10000, bad);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("high_freq_factor"), std::string::npos);
  bad = Llama3();
  bad.factor = 0;
  EXPECT_FALSE(RopeTable(8, 4, 10000, bad).ok());
  // Unscaled RoPE ignores the scaling fields.
  bad.type = RopeScalingType::kNone;
  EXPECT_TRUE(RopeTable(8, 4, 10000, bad).ok());
}

TEST(RopeTableTest, ParsesScalingNames) {
  EXPECT_EQ(*ParseRopeScalingType("none"), RopeScalingType::kNone);
  EXPECT_EQ(*ParseRopeScalingType("llama3"), RopeScalingType::kLlama3);
  EXPECT_EQ(RopeScalingTypeName(RopeScalingType::kLlama3), "llama3");
  const absl::StatusOr<RopeScalingType> bad = ParseRopeScalingType("yarn");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("llama3"), std::string::npos);
}

// B = 2 sequences of T = 5 tokens, H = 4 query heads over Hkv = 2 key/value
// heads of D = 6 channels (pairs i, i + 3); the table has more rows than T.
constexpr int64_t B = 2, T = 5, H = 4, Hkv = 2, D = 6;
constexpr int64_t W = (H + 2 * Hkv) * D;

TEST(RopeTest, ForwardMatchesNaive) {
  const RopeTables tables = Tables(D, 2 * T, DType::kF64);
  const Tensor qkv = Random({B, T, W}, 1);
  Tensor rotated = qkv.Clone();
  RopeForward(rotated, H, Hkv, tables.cos, tables.sin);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = (b * T + t) * W;
      for (int64_t head = 0; head < H + 2 * Hkv; ++head) {
        for (int64_t i = 0; i < D / 2; ++i) {
          const int64_t lo = row + head * D + i, hi = lo + D / 2;
          const double angle = t * std::pow(10000.0, -2.0 * i / D);
          const double x1 = Get(qkv, lo), x2 = Get(qkv, hi);
          double y1 = x1, y2 = x2;  // V heads stay as they were
          if (head < H + Hkv) {
            y1 = x1 * std::cos(angle) - x2 * std::sin(angle);
            y2 = x2 * std::cos(angle) + x1 * std::sin(angle);
          }
          EXPECT_NEAR(Get(rotated, lo), y1, 1e-14) << b << t << head << i;
          EXPECT_NEAR(Get(rotated, hi), y2, 1e-14) << b << t << head << i;
        }
      }
    }
  }
}

TEST(RopeTest, ForwardThenBackwardIsIdentity) {
  for (const DType dtype : {DType::kF64, DType::kF32}) {
    const RopeTables tables = Tables(D, T, dtype, Llama3());
    const Tensor qkv = Random({B, T, W}, 1, dtype);
    Tensor x = qkv.Clone();
    RopeForward(x, H, Hkv, tables.cos, tables.sin);
    EXPECT_GT(RelError(x, qkv), 0.1);  // it did rotate
    RopeBackward(x, H, Hkv, tables.cos, tables.sin);
    EXPECT_LT(RelError(x, qkv), dtype == DType::kF64 ? 1e-15 : 1e-6);
  }
}

TEST(RopeTest, BackwardMatchesFiniteDifferences) {
  const RopeTables tables = Tables(D, T, DType::kF64, Llama3(), 20);
  Tensor qkv = Random({B, T, W}, 1);
  const Tensor g = Random({B, T, W}, 2);
  auto loss = [&] {
    Tensor x = qkv.Clone();
    RopeForward(x, H, Hkv, tables.cos, tables.sin);
    return Dot(x, g);
  };
  Tensor grad = g.Clone();
  RopeBackward(grad, H, Hkv, tables.cos, tables.sin);
  EXPECT_LT(RelError(grad, NumericGradient(loss, qkv)), 1e-9);
}

TEST(RopeTest, Float32MatchesFloat64) {
  const RopeTables t64 = Tables(D, T, DType::kF64);
  const RopeTables t32 = Tables(D, T, DType::kF32);
  Tensor x64 = Random({B, T, W}, 1);
  Tensor x32 = Cast(x64, DType::kF32);
  RopeForward(x64, H, Hkv, t64.cos, t64.sin);
  RopeForward(x32, H, Hkv, t32.cos, t32.sin);
  EXPECT_LT(RelError(x32, x64), 1e-6);
}

TEST(RopeDeathTest, ChecksShapes) {
  const RopeTables tables = Tables(D, T - 1, DType::kF64);
  Tensor qkv = Random({B, T, W}, 1);
  EXPECT_DEATH(RopeForward(qkv, H, Hkv, tables.cos, tables.sin), "tables");
  const RopeTables ok = Tables(D, T, DType::kF64);
  EXPECT_DEATH(RopeForward(qkv, H + 1, Hkv, ok.cos, ok.sin), "heads");
  const RopeTables f32 = Tables(D, T, DType::kF32);
  EXPECT_DEATH(RopeForward(qkv, H, Hkv, f32.cos, f32.sin), "float32");
}

}  // namespace
}  // namespace trellis
