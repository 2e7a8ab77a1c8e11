// Document-masked attention (attention.h, doc_start): block-causal over the
// documents of a window.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "framework/kernels/attention.h"
#include "tests/framework/kernel_test_util.h"

namespace trellis {
namespace {

using kernel_test::DocStarts;
using kernel_test::Dot;
using kernel_test::Get;
using kernel_test::NumericGradient;
using kernel_test::Random;
using kernel_test::RelError;

struct Dims {
  int64_t B, T, H, Hkv, D;
  int64_t Width() const { return (H + 2 * Hkv) * D; }
  int64_t C() const { return H * D; }
};

struct Forward {
  Tensor out, saved;
};

Forward RunMasked(const Tensor& qkv, const Tensor& doc_start, const Dims& d) {
  Forward f{Tensor::Empty({d.B, d.T, d.C()}, qkv.dtype()),
            Tensor::Empty(AttentionSavedShape(Device::Cpu(), d.B, d.T, d.H),
                          qkv.dtype())};
  AttentionForward(qkv, doc_start, d.H, d.Hkv, f.out, f.saved);
  return f;
}

Tensor Backward(const Tensor& g, const Tensor& qkv, const Tensor& doc_start,
                const Forward& f, const Dims& d) {
  Tensor dqkv = Tensor::Zeros(qkv.shape(), qkv.dtype());
  AttentionBackward(g, qkv, doc_start, f.out, f.saved, d.H, d.Hkv, dqkv);
  return dqkv;
}

// Rows [t0, t0 + n) of batch row b of x (B, T, W) as a (1, n, W) tensor.
Tensor Rows(const Tensor& x, int64_t b, int64_t t0, int64_t n) {
  const int64_t T = x.dim(1), W = x.dim(2);
  Tensor out = Tensor::Empty({1, n, W}, x.dtype());
  std::memcpy(out.data<double>(), x.data<double>() + (b * T + t0) * W,
              n * W * sizeof(double));
  return out;
}

void ExpectRowsEqual(const Tensor& part, const Tensor& whole, int64_t b,
                     int64_t t0, double tol) {
  const Tensor mine = Rows(whole, b, t0, part.dim(1));
  EXPECT_LT(RelError(mine, part), tol) << "row " << b << " from " << t0;
}

// Masked attention over a window equals attention over each document alone,
// forward and backward (GQA included).
TEST(AttentionDocumentTest, EqualsEachDocumentAlone) {
  const Dims d{2, 70, 4, 2, 3};
  const std::vector<std::vector<int64_t>> docs = {{5, 40, 1, 24}, {70}};
  const Tensor starts = DocStarts(docs, d.T);
  Tensor qkv = Random({d.B, d.T, d.Width()}, 1, DType::kF64, -2, 2);
  Tensor g = Random({d.B, d.T, d.C()}, 2);
  const Forward f = RunMasked(qkv, starts, d);
  const Tensor dqkv = Backward(g, qkv, starts, f, d);
  for (int64_t b = 0; b < d.B; ++b) {
    int64_t t0 = 0;
    for (int64_t len : docs[b]) {
      const Dims one{1, len, d.H, d.Hkv, d.D};
      const Tensor q = Rows(qkv, b, t0, len);
      const Forward alone = RunMasked(q, Tensor(), one);
      ExpectRowsEqual(alone.out, f.out, b, t0, 1e-13);
      ExpectRowsEqual(Backward(Rows(g, b, t0, len), q, Tensor(), alone, one),
                      dqkv, b, t0, 1e-13);
      t0 += len;
    }
  }
}

TEST(AttentionDocumentTest, BackwardMatchesFiniteDifferences) {
  const Dims d{2, 37, 2, 1, 3};
  const Tensor starts = DocStarts({{3, 30, 4}, {1, 1, 35}}, d.T);
  Tensor qkv = Random({d.B, d.T, d.Width()}, 3, DType::kF64, -1.5, 1.5);
  Tensor g = Random({d.B, d.T, d.C()}, 4);
  const Tensor dqkv = Backward(g, qkv, starts, RunMasked(qkv, starts, d), d);
  auto loss = [&] { return Dot(RunMasked(qkv, starts, d).out, g); };
  EXPECT_LT(RelError(dqkv, NumericGradient(loss, qkv)), 1e-7);
}

// One document per row is plain causal attention, bit for bit.
TEST(AttentionDocumentTest, OneDocumentIsPlainCausal) {
  const Dims d{2, 45, 2, 2, 4};
  const Tensor zeros = DocStarts({{45}, {45}}, d.T);
  Tensor qkv = Random({d.B, d.T, d.Width()}, 5, DType::kF32);
  Tensor g = Random({d.B, d.T, d.C()}, 6, DType::kF32);
  const Forward masked = RunMasked(qkv, zeros, d),
                plain = RunMasked(qkv, Tensor(), d);
  const Tensor dm = Backward(g, qkv, zeros, masked, d);
  const Tensor dp = Backward(g, qkv, Tensor(), plain, d);
  EXPECT_EQ(std::memcmp(masked.out.data<float>(), plain.out.data<float>(),
                        masked.out.numel() * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(dm.data<float>(), dp.data<float>(), dm.numel() * 4), 0);
}

TEST(AttentionDocumentDeathTest, ChecksDocStarts) {
  const Dims d{1, 4, 1, 1, 2};
  Tensor qkv = Random({d.B, d.T, d.Width()}, 7);
  Tensor bad = DocStarts({{4}}, d.T);
  bad.data<int32_t>()[2] = 3;  // after its own position
  EXPECT_DEATH(RunMasked(qkv, bad, d), "doc_start\\[0, 2\\] = 3");
}

}  // namespace
}  // namespace trellis
