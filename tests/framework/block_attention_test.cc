// Blockwise attention with log-sum-exp merge (block_attention.h): a window
// cut into 2N chunks and dealt to N holders as context parallelism deals
// it (holder r gets chunks r and 2N-1-r), each holder attending its
// queries to every holder's keys block by block and merging, gives the
// whole-window attention and its gradients (attention.h), with and
// without document masking; and the backward against central finite
// differences through a merge of two partly masked blocks.
#include "framework/kernels/block_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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
using kernel_test::Set;

struct Dims {
  int64_t B, T, H, Hkv, D;
  int64_t Width() const { return (H + 2 * Hkv) * D; }
  int64_t C() const { return H * D; }
  int64_t KvWidth() const { return 2 * Hkv * D; }
};

Tensor Positions(const std::vector<int32_t>& pos) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(pos.size())}, DType::kI32);
  for (size_t i = 0; i < pos.size(); ++i) t.data<int32_t>()[i] = pos[i];
  return t;
}

// Holder r's window positions: chunks r and 2n-1-r of 2n, in order.
std::vector<int32_t> HolderPositions(int64_t T, int64_t n, int64_t r) {
  const int64_t c = T / (2 * n);
  std::vector<int32_t> pos;
  for (int64_t chunk : {r, 2 * n - 1 - r}) {
    for (int64_t i = 0; i < c; ++i) pos.push_back(chunk * c + i);
  }
  return pos;
}

// Columns [begin, begin + width) of the rows `pos` of x (B, T, W).
Tensor Gather(const Tensor& x, const std::vector<int32_t>& pos, int64_t begin,
              int64_t width) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2);
  const int64_t n = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::Empty({B, n, width}, x.dtype());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < width; ++j) {
        Set(out, (b * n + i) * width + j,
            Get(x, (b * T + pos[i]) * W + begin + j));
      }
    }
  }
  return out;
}

// x (B, T, W) columns [begin, begin + width) of the rows `pos` += part.
void ScatterAdd(const Tensor& part, const std::vector<int32_t>& pos,
                int64_t begin, Tensor& x) {
  const int64_t B = x.dim(0), T = x.dim(1), W = x.dim(2);
  const int64_t n = part.dim(1), width = part.dim(2);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < width; ++j) {
        const int64_t at = (b * T + pos[i]) * W + begin + j;
        Set(x, at, Get(x, at) + Get(part, (b * n + i) * width + j));
      }
    }
  }
}

// doc_start (B, T) read at the positions `pos`: (B, n), or undefined.
Tensor GatherStarts(const Tensor& doc_start, const std::vector<int32_t>& pos) {
  if (!doc_start.defined()) return Tensor();
  const int64_t B = doc_start.dim(0), T = doc_start.dim(1);
  const int64_t n = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::Empty({B, n}, DType::kI32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      out.data<int32_t>()[b * n + i] =
          doc_start.data<int32_t>()[b * T + pos[i]];
    }
  }
  return out;
}

// The whole-window reference (attention.h): out and dqkv.
struct Whole {
  Tensor out, dqkv;
};

Whole Reference(const Tensor& qkv, const Tensor& doc_start, const Tensor& g,
                const Dims& d) {
  Whole w{Tensor::Empty({d.B, d.T, d.C()}, qkv.dtype()),
          Tensor::Zeros(qkv.shape(), qkv.dtype())};
  Tensor saved = Tensor::Empty(
      AttentionSavedShape(Device::Cpu(), d.B, d.T, d.H), qkv.dtype());
  AttentionForward(qkv, doc_start, d.H, d.Hkv, w.out, saved);
  AttentionBackward(g, qkv, doc_start, w.out, saved, d.H, d.Hkv, w.dqkv);
  return w;
}

// The same through n holders and blocks, assembled back into the window.
Whole Blockwise(const Tensor& qkv, const Tensor& doc_start, const Tensor& g,
                const Dims& d, int64_t n) {
  std::vector<std::vector<int32_t>> pos(n);
  std::vector<Tensor> q(n), kv(n), dkv(n);
  for (int64_t r = 0; r < n; ++r) {
    pos[r] = HolderPositions(d.T, n, r);
    q[r] = Gather(qkv, pos[r], 0, d.C());
    kv[r] = Gather(qkv, pos[r], d.C(), d.KvWidth());
    dkv[r] = Tensor::Zeros(kv[r].shape(), qkv.dtype());
  }
  Whole w{Tensor::Zeros({d.B, d.T, d.C()}, qkv.dtype()),
          Tensor::Zeros(qkv.shape(), qkv.dtype())};
  for (int64_t r = 0; r < n; ++r) {
    const Tensor q_pos = Positions(pos[r]);
    const Tensor local_starts = GatherStarts(doc_start, pos[r]);
    const int64_t tl = q[r].dim(1);
    Tensor out = Tensor::Empty(q[r].shape(), qkv.dtype());
    Tensor lse = Tensor::Empty({d.B, d.H, tl}, qkv.dtype());
    Tensor block_out = Tensor::Empty(out.shape(), qkv.dtype());
    Tensor block_lse = Tensor::Empty(lse.shape(), qkv.dtype());
    std::vector<Tensor> k_pos(n);
    // Own block first, then the others in ring order, as the ring passes.
    for (int64_t step = 0; step < n; ++step) {
      const int64_t s = (r - step + n) % n;
      k_pos[s] = Positions(pos[s]);
      const BlockMask mask{&q_pos, &k_pos[s],
                           local_starts.defined() ? &local_starts : nullptr};
      if (step == 0) {
        BlockAttentionForward(q[r], kv[s], mask, d.H, d.Hkv, out, lse);
      } else {
        BlockAttentionForward(q[r], kv[s], mask, d.H, d.Hkv, block_out,
                              block_lse);
        AttentionMergeBlock(out, lse, block_out, block_lse);
      }
    }
    const Tensor dout = Gather(g, pos[r], 0, d.C());
    Tensor dq = Tensor::Zeros(q[r].shape(), qkv.dtype());
    for (int64_t s = 0; s < n; ++s) {
      const BlockMask mask{&q_pos, &k_pos[s],
                           local_starts.defined() ? &local_starts : nullptr};
      BlockAttentionBackward(dout, q[r], kv[s], mask, out, lse, d.H, d.Hkv, dq,
                             dkv[s]);
    }
    ScatterAdd(out, pos[r], 0, w.out);
    ScatterAdd(dq, pos[r], 0, w.dqkv);
  }
  for (int64_t s = 0; s < n; ++s) ScatterAdd(dkv[s], pos[s], d.C(), w.dqkv);
  return w;
}

void ExpectBlockwiseMatchesWhole(const Dims& d, const Tensor& doc_start,
                                 DType dtype, double tolerance) {
  const Tensor qkv = Random({d.B, d.T, d.Width()}, 1, dtype, -2, 2);
  const Tensor g = Random({d.B, d.T, d.C()}, 2, dtype);
  const Whole want = Reference(qkv, doc_start, g, d);
  for (int64_t n : {1, 2, 4}) {
    const Whole got = Blockwise(qkv, doc_start, g, d, n);
    EXPECT_LT(RelError(got.out, want.out), tolerance) << n << " holders";
    EXPECT_LT(RelError(got.dqkv, want.dqkv), tolerance) << n << " holders";
  }
}

TEST(BlockAttentionTest, HoldersOfAZigzagSplitGiveTheWholeAttention) {
  ExpectBlockwiseMatchesWhole({2, 16, 4, 2, 3}, Tensor(), DType::kF64, 1e-12);
  ExpectBlockwiseMatchesWhole({1, 96, 2, 2, 8}, Tensor(), DType::kF32, 2e-5);
}

TEST(BlockAttentionTest, DocumentMaskingAcrossHolders) {
  const Tensor starts = DocStarts({{5, 9, 2}, {16}}, 16);
  ExpectBlockwiseMatchesWhole({2, 16, 4, 2, 3}, starts, DType::kF64, 1e-12);
  const Tensor many = DocStarts({{1, 40, 7, 48}}, 96);
  ExpectBlockwiseMatchesWhole({1, 96, 2, 1, 8}, many, DType::kF32, 2e-5);
}

// Two blocks of keys at scattered positions, some queries seeing neither.
struct TwoBlocks {
  static constexpr int64_t B = 2, Tq = 5, H = 4, Hkv = 2, D = 3;
  Tensor q = Random({B, Tq, H* D}, 3, DType::kF64, -2, 2);
  Tensor kv1 = Random({B, 3, 2 * Hkv* D}, 4, DType::kF64, -2, 2);
  Tensor kv2 = Random({B, 4, 2 * Hkv* D}, 5, DType::kF64, -2, 2);
  Tensor g = Random({B, Tq, H* D}, 6);
  Tensor q_pos = Positions({1, 4, 6, 9, 12});
  Tensor k1 = Positions({2, 3, 10});
  Tensor k2 = Positions({0, 4, 5, 11});
  Tensor starts = DocStarts({{3, 3, 7}, {13}}, 13);  // over window positions
  Tensor local_starts = GatherStarts(starts, {1, 4, 6, 9, 12});

  BlockMask Mask(const Tensor& k_pos) const {
    return {&q_pos, &k_pos, &local_starts};
  }
  void Forward(Tensor& out, Tensor& lse) {
    out = Tensor::Empty(q.shape(), DType::kF64);
    lse = Tensor::Empty({B, H, Tq}, DType::kF64);
    Tensor bo = Tensor::Empty(q.shape(), DType::kF64);
    Tensor bl = Tensor::Empty({B, H, Tq}, DType::kF64);
    BlockAttentionForward(q, kv1, Mask(k1), H, Hkv, out, lse);
    BlockAttentionForward(q, kv2, Mask(k2), H, Hkv, bo, bl);
    AttentionMergeBlock(out, lse, bo, bl);
  }
  double Loss() {
    Tensor out, lse;
    Forward(out, lse);
    return Dot(out, g);
  }
};

TEST(BlockAttentionTest, BackwardThroughAMergeMatchesFiniteDifferences) {
  TwoBlocks c;
  Tensor out, lse;
  c.Forward(out, lse);
  // Query 0 (position 1) of batch row 0 sees key 0 only; in row 0, query 1
  // (position 4, document from 3) sees keys 3 and 4 of the two blocks.
  Tensor dq = Tensor::Zeros(c.q.shape(), DType::kF64);
  Tensor dkv1 = Tensor::Zeros(c.kv1.shape(), DType::kF64);
  Tensor dkv2 = Tensor::Zeros(c.kv2.shape(), DType::kF64);
  BlockAttentionBackward(c.g, c.q, c.kv1, c.Mask(c.k1), out, lse, c.H, c.Hkv,
                         dq, dkv1);
  BlockAttentionBackward(c.g, c.q, c.kv2, c.Mask(c.k2), out, lse, c.H, c.Hkv,
                         dq, dkv2);
  auto loss = [&] { return c.Loss(); };
  EXPECT_LT(RelError(dq, NumericGradient(loss, c.q)), 1e-8);
  EXPECT_LT(RelError(dkv1, NumericGradient(loss, c.kv1)), 1e-8);
  EXPECT_LT(RelError(dkv2, NumericGradient(loss, c.kv2)), 1e-8);
}

TEST(BlockAttentionTest, AQueryWithNoKeyInTheBlockIsAnEmptyBlock) {
  TwoBlocks c;
  Tensor out = Tensor::Empty(c.q.shape(), DType::kF64);
  Tensor lse = Tensor::Empty({c.B, c.H, c.Tq}, DType::kF64);
  // Keys 2, 3, 10: the query at position 1 sees none of them.
  const BlockMask causal{&c.q_pos, &c.k1, nullptr};
  BlockAttentionForward(c.q, c.kv1, causal, c.H, c.Hkv, out, lse);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.H; ++h) {
      EXPECT_EQ(Get(lse, (b * c.H + h) * c.Tq),
                -std::numeric_limits<double>::infinity());
      EXPECT_TRUE(std::isfinite(Get(lse, (b * c.H + h) * c.Tq + 1)));
    }
    for (int64_t j = 0; j < c.H * c.D; ++j) {
      EXPECT_EQ(Get(out, b * c.Tq * c.H * c.D + j), 0.0);
    }
  }
  // Merging such a block changes nothing; merging into it copies.
  Tensor kept = out.Clone(), kept_lse = lse.Clone();
  Tensor empty_lse = Tensor::Empty(lse.shape(), DType::kF64);
  for (int64_t i = 0; i < empty_lse.numel(); ++i) {
    Set(empty_lse, i, -std::numeric_limits<double>::infinity());
  }
  const Tensor junk = Random(out.shape(), 7);
  AttentionMergeBlock(out, lse, junk, empty_lse);
  EXPECT_EQ(RelError(out, kept), 0.0);
  EXPECT_EQ(RelError(lse, kept_lse), 0.0);
}

TEST(BlockAttentionTest, BadPositionsFailTheirCheck) {
  TwoBlocks c;
  Tensor out = Tensor::Empty(c.q.shape(), DType::kF64);
  Tensor lse = Tensor::Empty({c.B, c.H, c.Tq}, DType::kF64);
  const Tensor unsorted = Positions({3, 2, 10});
  const BlockMask bad{&c.q_pos, &unsorted, nullptr};
  EXPECT_DEATH(BlockAttentionForward(c.q, c.kv1, bad, c.H, c.Hkv, out, lse),
               "k_pos decreases");
  const Tensor late = DocStarts({{13}, {13}}, 13);  // all zero: fine
  Tensor after = GatherStarts(late, {1, 4, 6, 9, 12});
  after.data<int32_t>()[0] = 5;  // query 0 sits at position 1
  const BlockMask doc{&c.q_pos, &c.k1, &after};
  EXPECT_DEATH(BlockAttentionForward(c.q, c.kv1, doc, c.H, c.Hkv, out, lse),
               "doc_start 5 after");
  const Tensor short_pos = Positions({1, 2});
  const BlockMask shape{&short_pos, &c.k1, nullptr};
  EXPECT_DEATH(BlockAttentionForward(c.q, c.kv1, shape, c.H, c.Hkv, out, lse),
               "q_pos and k_pos");
}

}  // namespace
}  // namespace trellis
