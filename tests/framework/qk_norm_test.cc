// The per-head q/k RMSNorm (framework/kernels/qk_norm.h): the forward
// against a naive per-head RMSNorm (values untouched), and the backward's
// input and weight gradients against finite differences, with grouped
// keys.
#include "framework/kernels/qk_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;

constexpr int64_t N = 3, H = 4, Hkv = 2, D = 6, W = (H + 2 * Hkv) * D;
constexpr double kEps = 1e-6;

struct QkCase {
  Tensor qkv = Random({N, W}, 1, DType::kF64, -2, 2);
  Tensor wq = Random({D}, 2, DType::kF64, 0.5, 1.5);
  Tensor wk = Random({D}, 3, DType::kF64, 0.5, 1.5);
  Tensor g = Random({N, W}, 4);  // upstream gradient

  Tensor Forward(Tensor* in = nullptr, Tensor* rstd = nullptr) {
    Tensor out = qkv.Clone();
    Tensor saved = Tensor::Empty({N, (H + Hkv) * D}, DType::kF64);
    Tensor s = Tensor::Empty({N, H + Hkv}, DType::kF64);
    QkNormForward(out, H, Hkv, wq, wk, kEps, saved, s);
    if (in != nullptr) *in = saved;
    if (rstd != nullptr) *rstd = s;
    return out;
  }
  // sum(QkNorm(qkv) ⊙ g).
  double Loss() { return Dot(Forward(), g); }
};

TEST(QkNormTest, ForwardNormalizesEachQueryAndKeyHeadAlone) {
  QkCase c;
  Tensor in, rstd;
  const Tensor out = c.Forward(&in, &rstd);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t h = 0; h < H + 2 * Hkv; ++h) {
      double square = 0;
      for (int64_t j = 0; j < D; ++j) {
        square += std::pow(Get(c.qkv, i * W + h * D + j), 2) / D;
      }
      const double s = 1 / std::sqrt(square + kEps);
      for (int64_t j = 0; j < D; ++j) {
        const int64_t at = i * W + h * D + j;
        const double x = Get(c.qkv, at);
        if (h >= H + Hkv) {  // values pass through
          EXPECT_EQ(Get(out, at), x);
          continue;
        }
        const double w = Get(h < H ? c.wq : c.wk, j);
        EXPECT_NEAR(Get(out, at), x * s * w, 1e-13);
        EXPECT_EQ(Get(in, (i * (H + Hkv) + h) * D + j), x);
      }
      if (h < H + Hkv) {
        EXPECT_NEAR(Get(rstd, i * (H + Hkv) + h), s, 1e-13);
      }
    }
  }
}

TEST(QkNormTest, BackwardMatchesFiniteDifferences) {
  QkCase c;
  Tensor in, rstd;
  c.Forward(&in, &rstd);
  Tensor dqkv = c.g.Clone();
  Tensor dw = Random({2, D}, 5);  // overwritten
  QkNormBackward(dqkv, H, Hkv, in, rstd, c.wq, c.wk, dw);
  const Tensor num_x = NumericGradient([&] { return c.Loss(); }, c.qkv);
  const Tensor num_wq = NumericGradient([&] { return c.Loss(); }, c.wq);
  const Tensor num_wk = NumericGradient([&] { return c.Loss(); }, c.wk);
  EXPECT_LT(RelError(dqkv, num_x), 1e-7);
  EXPECT_LT(RelError(dw.Narrow(0, 1).View({D}), num_wq), 1e-7);
  EXPECT_LT(RelError(dw.Narrow(1, 1).View({D}), num_wk), 1e-7);
}

}  // namespace
}  // namespace trellis
