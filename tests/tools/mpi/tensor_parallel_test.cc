// Tensor-parallel layers against their unsharded twins: each layer runs on
// its shards over tp = 2 and 4 ranks, and the plain kernels run on the whole
// tensors in every process; outputs, input gradients and weight gradients
// must agree (float64, to rounding). The vocabulary (257 ids, like the byte
// tokenizer's) is padded unevenly: to 258 rows for tp 2, to 260 for tp 4,
// where the last shard holds 62 real rows of 65.
#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/embedding.h"
#include "framework/kernels/matmul.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/parameter.h"
#include "tests/tools/mpi/comm_stats_test_util.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "transformer/config.h"

namespace trellis {
namespace {

using mpitest::Since;

constexpr int64_t kVocab = 257;

// Deterministic, varied test values.
double ValueAt(int salt, int64_t i) {
  return 0.5 * std::sin(0.37 * static_cast<double>(i) + 1.3 * salt) +
         0.1 * std::cos(0.011 * static_cast<double>(i * i % 997));
}

Tensor Whole(Shape shape, int salt) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kF64);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = ValueAt(salt, i);
  return t;
}

// A parameter cut from the logical tensor Whole(spec.logical_shape, salt).
Parameter& AddShard(ParameterSet& params, const std::string& name,
                    ShardSpec spec, int salt) {
  Parameter& p =
      params.Add(name, std::move(spec), false, Device::Cpu(), DType::kF64);
  InitializeParameter(p, [salt](int64_t i) { return ValueAt(salt, i); });
  return p;
}

void ExpectNearAll(const Tensor& got, const Tensor& want,
                   const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.data<double>()[i];
    ASSERT_NEAR(got.data<double>()[i], w, 1e-11 * (1 + std::abs(w)))
        << what << " element " << i;
  }
}

// `local` (a shard laid out by `spec`) against the whole `want`; padding
// must be exactly zero.
void ExpectShardOf(const Tensor& local, const ShardSpec& spec,
                   const Tensor& want, const std::string& what) {
  ASSERT_EQ(local.shape(), spec.LocalShape()) << what;
  ASSERT_EQ(want.shape(), spec.logical_shape) << what;
  int64_t mismatches = 0, padded_nonzero = 0;
  spec.ForEachElement([&](int64_t i, int64_t logical) {
    const double got = local.data<double>()[i];
    if (logical < 0) {
      padded_nonzero += got != 0.0;
      return;
    }
    const double w = want.data<double>()[logical];
    mismatches += std::abs(got - w) > 1e-11 * (1 + std::abs(w));
  });
  EXPECT_EQ(mismatches, 0) << what << " (" << spec.DebugString() << ")";
  EXPECT_EQ(padded_nonzero, 0) << what << ": padding is not zero";
}

class TensorParallelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<MpiRuntime>(nullptr, nullptr);
    tp_size_ = GetParam();
    absl::StatusOr<Mesh> mesh =
        Mesh::Create(mpitest::WorldSize(), 0, tp_size_, 1);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh);
    ASSERT_TRUE(context.ok()) << context.status();
    context_ = std::make_unique<ParallelContext>(*std::move(context));
    tp_rank_ = context_->coord().t;
  }
  Communicator& tp() { return *context_->groups().tp; }
  ShardSpec Split(Shape shape, int dim, int64_t groups = 1,
                  int64_t padded = 0) const {
    return ShardSpec::Split(std::move(shape), dim, tp_size_, tp_rank_, groups,
                            padded);
  }
  // The vocabulary-parallel (V, C) table, padded rows filled with `pad` so
  // that any use of them shows.
  Parameter& AddVocabTable(ParameterSet& params, int64_t c, double pad) {
    Parameter& table =
        AddShard(params, "wte",
                 Split({kVocab, c}, 0, 1, PaddedVocab(kVocab, tp_size_)), 3);
    table.spec.ForEachElement([&](int64_t i, int64_t logical) {
      if (logical < 0) table.value.data<double>()[i] = pad;
    });
    return table;
  }
  // Ids covering the first and last real row of every shard, the last id,
  // and repeats (gradients accumulate).
  Tensor BoundaryIds(int64_t n) const {
    const int64_t rows = PaddedVocab(kVocab, tp_size_) / tp_size_;
    std::vector<int32_t> ids;
    for (int64_t s = 0; s < tp_size_; ++s) {
      ids.push_back(static_cast<int32_t>(s * rows));
      ids.push_back(
          static_cast<int32_t>(std::min<int64_t>((s + 1) * rows, kVocab) - 1));
    }
    Tensor t = Tensor::Empty({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      t.data<int32_t>()[i] = i < static_cast<int64_t>(ids.size())
                                 ? ids[i]
                                 : static_cast<int32_t>((i * 53 + 7) % kVocab);
    }
    return t;
  }

  std::unique_ptr<MpiRuntime> runtime_;
  std::unique_ptr<ParallelContext> context_;
  int64_t tp_size_ = 1;
  int64_t tp_rank_ = 0;
};

// x (N, K) → column-parallel (K, M) → row-parallel (M, K2) → y, against the
// two whole layers; with groups = 3 the columns are cut like c_attn's
// [Q | K | V].
TEST_P(TensorParallelTest, ColumnThenRowParallelMatchesTheWholeLayers) {
  const int64_t n = 6, k = 8, m = 24, k2 = 8;
  for (int64_t groups : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("groups=", groups));
    ParameterSet params;
    Parameter& w1 = AddShard(params, "w1", Split({k, m}, 1, groups), 1);
    Parameter& b1 = AddShard(params, "b1", Split({m}, 0, groups), 2);
    Parameter& w2 = AddShard(params, "w2", Split({m, k2}, 0, groups), 3);
    Parameter& b2 = AddShard(params, "b2", ShardSpec::Replicated({k2}), 4);
    const Tensor x = Whole({n, k}, 5), dy = Whole({n, k2}, 6);
    const ColumnParallelLinear column(w1, b1);
    const RowParallelLinear row(w2, b2);
    // Sharded.
    Tensor h = Tensor::Empty({n, m / tp_size_}, DType::kF64);
    Tensor y = Tensor::Empty({n, k2}, DType::kF64);
    CommStats before = tp().stats();
    column.Forward(x, h);
    row.Forward(tp(), h, y);
    EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce), 1);
    Tensor dh = Tensor::Zeros({n, m / tp_size_}, DType::kF64);
    Tensor dx = Tensor::Zeros({n, k}, DType::kF64);
    before = tp().stats();
    row.BackwardInput(dy, dh);
    column.BackwardInput(tp(), dh, dx);
    EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce), 1);
    row.BackwardWeight(dy, h);
    column.BackwardWeight(dh, x);
    // Whole.
    Tensor W1 = Whole({k, m}, 1), B1 = Whole({m}, 2), W2 = Whole({m, k2}, 3),
           B2 = Whole({k2}, 4);
    Tensor H = Tensor::Empty({n, m}, DType::kF64);
    Tensor Y = Tensor::Empty({n, k2}, DType::kF64);
    MatmulForward(x, W1, B1, H);
    MatmulForward(H, W2, B2, Y);
    Tensor dH = Tensor::Zeros({n, m}, DType::kF64);
    Tensor dX = Tensor::Zeros({n, k}, DType::kF64);
    Tensor dW1 = Tensor::Zeros({k, m}, DType::kF64);
    Tensor dB1 = Tensor::Zeros({m}, DType::kF64);
    Tensor dW2 = Tensor::Zeros({m, k2}, DType::kF64);
    Tensor dB2 = Tensor::Zeros({k2}, DType::kF64);
    MatmulBackwardInput(dy, W2, dH);
    MatmulBackwardInput(dH, W1, dX);
    MatmulBackwardWeight(dy, H, dW2, dB2);
    MatmulBackwardWeight(dH, x, dW1, dB1);
    ExpectNearAll(y, Y, "y");
    ExpectNearAll(dx, dX, "dx");
    ExpectShardOf(h, Split({n, m}, 1, groups), H, "hidden");
    ExpectShardOf(w1.grad, w1.spec, dW1, "dw1");
    ExpectShardOf(b1.grad, b1.spec, dB1, "db1");
    ExpectShardOf(w2.grad, w2.spec, dW2, "dw2");
    ExpectShardOf(b2.grad, b2.spec, dB2, "db2");
  }
}

TEST_P(TensorParallelTest, VocabParallelEmbeddingMatchesTheWholeTable) {
  const int64_t n = 40, c = 8;
  ParameterSet params;
  Parameter& table = AddVocabTable(params, c, 0.0);
  const Tensor ids = BoundaryIds(n);
  const Tensor dout = Whole({n, c}, 7);
  Tensor out = Tensor::Empty({n, c}, DType::kF64);
  const CommStats before = tp().stats();
  VocabParallelEmbeddingForward(tp(), ids, table, out);
  EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce),
            tp_size_ > 1 ? 1 : 0);
  VocabParallelEmbeddingBackwardWeight(ids, dout, table);
  VocabParallelEmbeddingBackwardWeight(ids, dout, table);  // accumulates
  const Tensor whole = Whole({kVocab, c}, 3);
  Tensor want = Tensor::Empty({n, c}, DType::kF64);
  Tensor dwhole = Tensor::Zeros({kVocab, c}, DType::kF64);
  EmbeddingForward(ids, whole, 0, want);
  EmbeddingBackwardWeight(ids, dout, 0, dwhole);
  EmbeddingBackwardWeight(ids, dout, 0, dwhole);
  ExpectNearAll(out, want, "embedding");
  ExpectShardOf(table.grad, table.spec, dwhole, "dtable");
}

// The tied LM head and the cross-entropy over the whole vocabulary in one
// process, for rows x (n × c) of table `whole` (kVocab × c): the losses and
// the gradients of the logits, of x and of the table, the loss scaled by
// `scale`.
struct WholeHead {
  Tensor losses, dlogits, dx, dtable;
};
WholeHead WholeHeadAndLoss(const Tensor& x, const Tensor& whole,
                           const Tensor& targets, double scale) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  Tensor L = Tensor::Empty({n, kVocab}, DType::kF64);
  MatmulForward(x, whole, Tensor(), L, WeightLayout::kOutIn);
  Tensor row_max = Tensor::Empty({n}, DType::kF64);
  Tensor sumexp = Tensor::Empty({n}, DType::kF64);
  Tensor target_logit = Tensor::Empty({n}, DType::kF64);
  WholeHead out;
  out.losses = Tensor::Empty({n}, DType::kF64);
  CrossEntropyRowMax(L, kVocab, row_max);
  CrossEntropyRowSumExp(L, kVocab, row_max, sumexp);
  CrossEntropyTargetLogit(L, targets, 0, kVocab, target_logit);
  CrossEntropyLoss(row_max, sumexp, target_logit, out.losses);
  out.dlogits = Tensor::Empty({n, kVocab}, DType::kF64);
  CrossEntropyBackward(L, targets, 0, kVocab, row_max, sumexp, scale,
                       out.dlogits);
  out.dx = Tensor::Zeros({n, c}, DType::kF64);
  out.dtable = Tensor::Zeros({kVocab, c}, DType::kF64);
  Tensor no_bias;
  MatmulBackwardInput(out.dlogits, whole, out.dx, WeightLayout::kOutIn);
  MatmulBackwardWeight(out.dlogits, x, out.dtable, no_bias,
                       WeightLayout::kOutIn);
  return out;
}

// The tied LM head (logits = x · wteᵀ on the local vocabulary rows) and the
// vocab-parallel cross-entropy against the whole vocabulary: losses, the
// logit gradient, the input gradient (all-reduced over tp) and the table's
// gradient. Padded rows hold large values: if a padded logit entered the
// loss or got a gradient, the results would differ.
TEST_P(TensorParallelTest, VocabParallelHeadAndLossMatchTheWholeVocabulary) {
  const int64_t n = 12, c = 8;
  const double scale = 1.0 / n;
  ParameterSet params;
  Parameter& table = AddVocabTable(params, c, 50.0);
  const VocabShard shard = VocabShard::For(table.spec);
  const Tensor x = Whole({n, c}, 8);
  const Tensor targets = BoundaryIds(n);
  // Sharded.
  Tensor logits = Tensor::Empty({n, shard.rows}, DType::kF64);
  MatmulForward(x, table.value, Tensor(), logits, WeightLayout::kOutIn);
  VocabParallelLossState state;
  CommStats before = tp().stats();
  VocabParallelCrossEntropyForward(tp(), logits, targets, shard, state);
  EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce),
            tp_size_ > 1 ? 2 : 0);
  Tensor dlogits = Tensor::Empty({n, shard.rows}, DType::kF64);
  VocabParallelCrossEntropyBackward(logits, targets, shard, state, scale,
                                    dlogits);
  Tensor dx = Tensor::Zeros({n, c}, DType::kF64);
  MatmulBackwardInput(dlogits, table.value, dx, WeightLayout::kOutIn);
  before = tp().stats();
  CopyToTp::Backward(tp(), dx);
  EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce),
            tp_size_ > 1 ? 1 : 0);
  Tensor no_bias;
  MatmulBackwardWeight(dlogits, x, table.grad, no_bias, WeightLayout::kOutIn);
  // Sharded in chunks of rows (7 and 5) through caller-owned statistics
  // buffers, as the fused LM head runs it: the same losses and dlogits.
  Tensor chunk_losses = Tensor::Empty({n}, DType::kF64);
  Tensor chunk_dlogits = Tensor::Empty({n, shard.rows}, DType::kF64);
  const int64_t rows = 7;
  Tensor row_max_buffer = Tensor::Empty({rows}, DType::kF64);
  Tensor sums_buffer = Tensor::Empty({2 * rows}, DType::kF64);
  for (int64_t start = 0; start < n; start += rows) {
    const int64_t r = std::min(rows, n - start);
    VocabParallelLossState part{row_max_buffer.Narrow(0, r),
                                sums_buffer.Narrow(0, 2 * r).View({2, r}),
                                chunk_losses.Narrow(start, r)};
    const Tensor chunk_logits = logits.Narrow(start, r);
    const Tensor chunk_targets = targets.Narrow(start, r);
    before = tp().stats();
    VocabParallelCrossEntropyForward(tp(), chunk_logits, chunk_targets, shard,
                                     part);
    EXPECT_EQ(Since(tp(), before).Calls(CommOp::kAllReduce),
              tp_size_ > 1 ? 2 : 0);
    Tensor out = chunk_dlogits.Narrow(start, r);
    VocabParallelCrossEntropyBackward(chunk_logits, chunk_targets, shard, part,
                                      scale, out);
  }
  EXPECT_EQ(MaxRelativeDifference(chunk_losses, state.losses), 0.0);
  EXPECT_EQ(MaxRelativeDifference(chunk_dlogits, dlogits), 0.0);
  // Whole.
  const WholeHead want =
      WholeHeadAndLoss(x, Whole({kVocab, c}, 3), targets, scale);
  ExpectNearAll(state.losses, want.losses, "losses");
  ExpectShardOf(dlogits,
                Split({n, kVocab}, 1, 1, PaddedVocab(kVocab, tp_size_)),
                want.dlogits, "dlogits");
  ExpectNearAll(dx, want.dx, "dx");
  ExpectShardOf(table.grad, table.spec, want.dtable, "dwte");
  // A loss is a loss: log(V) is what uniform logits would give.
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GT(want.losses.data<double>()[i], 0.0);
    EXPECT_LT(want.losses.data<double>()[i], 2 * std::log(kVocab));
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, TensorParallelTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("tp", info.param);
                         });

}  // namespace
}  // namespace trellis
