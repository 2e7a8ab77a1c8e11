#include "parallel/tensor_parallel.h"

#include <algorithm>

#include "framework/kernels/cross_entropy.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/embedding.h"

namespace trellis {

void CopyToTp::Backward(Communicator& tp, Tensor& dx) {
  if (tp.size() > 1) tp.AllReduce(dx, ReduceOp::kSum);
}

void ReduceFromTp::Forward(Communicator& tp, Tensor& x) {
  if (tp.size() > 1) tp.AllReduce(x, ReduceOp::kSum);
}

void GatherFromSequence::Forward(Communicator& tp, Tensor& full) {
  if (tp.size() == 1) return;
  tp.AllGather(SequenceRows(full, tp.size(), tp.rank()), full);
}

void GatherFromSequence::Backward(Communicator& tp, Tensor& dfull) {
  if (tp.size() == 1) return;
  Tensor mine = SequenceRows(dfull, tp.size(), tp.rank());
  tp.ReduceScatter(dfull, mine, ReduceOp::kSum);
}

void ScatterToSequence::Forward(Communicator& tp, const Tensor& partial,
                                Tensor& local) {
  tp.ReduceScatter(partial, local, ReduceOp::kSum);
}

void ScatterToSequence::Backward(Communicator& tp, const Tensor& dlocal,
                                 Tensor& dfull) {
  tp.AllGather(dlocal, dfull);
}

Tensor SequenceRows(const Tensor& full, int64_t parts, int64_t index) {
  if (parts == 1) return full;
  const int64_t rows = full.dim(0);
  TRELLIS_CHECK_EQ(rows % parts, 0) << "sequence parallelism needs the " << rows
                                    << " rows divisible by tp = " << parts;
  return full.Narrow(index * (rows / parts), rows / parts);
}

ShardSpec ColumnParallelLinear::WeightSpec(int64_t in, int64_t out,
                                           int64_t parts, int64_t index,
                                           int64_t groups) {
  return ShardSpec::Split({in, out}, 1, parts, index, groups);
}

ShardSpec ColumnParallelLinear::BiasSpec(int64_t out, int64_t parts,
                                         int64_t index, int64_t groups) {
  return ShardSpec::Split({out}, 0, parts, index, groups);
}

ShardSpec ColumnParallelLinear::WeightSpec(int64_t in, int64_t parts,
                                           int64_t index,
                                           std::vector<int64_t> group_sizes,
                                           std::vector<int64_t> group_parts) {
  int64_t out = 0;
  for (int64_t size : group_sizes) out += size;
  return ShardSpec::SplitGroups({in, out}, 1, parts, index,
                                std::move(group_sizes), std::move(group_parts));
}

namespace {

void CheckColumnWeight(const Parameter& weight) {
  const ShardSpec& w = weight.spec;
  TRELLIS_CHECK(w.logical_shape.size() == 2 && w.split_dim == 1)
      << "column-parallel layer given " << weight.name << " split as "
      << w.DebugString() << "; its weight must be split along columns (dim 1)";
}

void CheckRowWeight(const Parameter& weight) {
  const ShardSpec& w = weight.spec;
  TRELLIS_CHECK(w.logical_shape.size() == 2 && w.split_dim == 0)
      << "row-parallel layer given " << weight.name << " split as "
      << w.DebugString() << "; its weight must be split along rows (dim 0)";
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(Parameter& weight)
    : weight_(weight), bias_(nullptr) {
  CheckColumnWeight(weight);
}

RowParallelLinear::RowParallelLinear(Parameter& weight)
    : weight_(weight), bias_(nullptr) {
  CheckRowWeight(weight);
}

ColumnParallelLinear::ColumnParallelLinear(Parameter& weight, Parameter& bias)
    : weight_(weight), bias_(&bias) {
  const ShardSpec& w = weight.spec;
  const ShardSpec& b = bias.spec;
  CheckColumnWeight(weight);
  TRELLIS_CHECK(b.logical_shape.size() == 1 && b.split_dim == 0 &&
                b.parts == w.parts && b.index == w.index &&
                b.groups == w.groups && b.group_sizes == w.group_sizes &&
                b.group_parts == w.group_parts &&
                b.logical_shape[0] == w.logical_shape[1])
      << "column-parallel layer given bias " << bias.name << " split as "
      << b.DebugString() << " for weight " << w.DebugString()
      << "; the bias must be split like the weight's columns";
}

ShardSpec RowParallelLinear::WeightSpec(int64_t in, int64_t out, int64_t parts,
                                        int64_t index) {
  return ShardSpec::Split({in, out}, 0, parts, index);
}

ShardSpec RowParallelLinear::BiasSpec(int64_t out) {
  return ShardSpec::Replicated({out});
}

RowParallelLinear::RowParallelLinear(Parameter& weight, Parameter& bias)
    : weight_(weight), bias_(&bias) {
  const ShardSpec& w = weight.spec;
  const ShardSpec& b = bias.spec;
  CheckRowWeight(weight);
  TRELLIS_CHECK(b.replicated() && b.logical_shape.size() == 1 &&
                b.logical_shape[0] == w.logical_shape[1])
      << "row-parallel layer given bias " << bias.name << " split as "
      << b.DebugString() << "; the bias must be replicated";
}

void ColumnParallelLinear::Forward(const Tensor& x, Tensor& y) const {
  MatmulForward(x, weight_.value, bias_ ? bias_->value : Tensor(), y);
}

void ColumnParallelLinear::ForwardGelu(const Tensor& x, Tensor& pre,
                                       Tensor& out) const {
  MatmulForwardGelu(x, weight_.value, bias_ ? bias_->value : Tensor(), pre,
                    out);
}

void ColumnParallelLinear::BackwardInput(Communicator& tp, const Tensor& dy,
                                         Tensor& dx) const {
  MatmulBackwardInput(dy, weight_.value, dx);
  CopyToTp::Backward(tp, dx);
}

void ColumnParallelLinear::BackwardWeight(const Tensor& dy,
                                          const Tensor& x) const {
  Tensor no_bias;
  MatmulBackwardWeight(dy, x, weight_.grad, bias_ ? bias_->grad : no_bias);
}

void RowParallelLinear::Forward(Communicator& tp, const Tensor& x,
                                Tensor& y) const {
  // One rank holds the whole product: the bias rides in the GEMM (cuBLASLt's
  // bias epilogue on CUDA) instead of a pass of its own.
  if (tp.size() == 1) {
    MatmulForward(x, weight_.value, bias_ ? bias_->value : Tensor(), y);
    return;
  }
  MatmulForward(x, weight_.value, Tensor(), y);
  ReduceFromTp::Forward(tp, y);
  if (bias_ != nullptr) AddBias(bias_->value, y);
}

void RowParallelLinear::ForwardResidual(Communicator& tp, const Tensor& x,
                                        const Tensor& residual,
                                        Tensor& y) const {
  if (tp.size() == 1) {
    MatmulForwardResidual(x, weight_.value, bias_ ? bias_->value : Tensor(),
                          residual, y);
    return;
  }
  Forward(tp, x, y);
  Add(y, residual, y);
}

void RowParallelLinear::ForwardToSequence(Communicator& tp, const Tensor& x,
                                          Tensor& partial, Tensor& y) const {
  MatmulForward(x, weight_.value, Tensor(), partial);
  ScatterToSequence::Forward(tp, partial, y);
  if (bias_ != nullptr) AddBias(bias_->value, y);
}

void RowParallelLinear::BackwardInput(const Tensor& dy, Tensor& dx) const {
  // ReduceFromTp's backward is the identity: dy is already replicated.
  MatmulBackwardInput(dy, weight_.value, dx);
}

void RowParallelLinear::BackwardWeight(const Tensor& dy,
                                       const Tensor& x) const {
  Tensor no_bias;
  MatmulBackwardWeight(dy, x, weight_.grad, bias_ ? bias_->grad : no_bias);
}

VocabShard VocabShard::For(const ShardSpec& spec) {
  VocabShard shard;
  const Shape local = spec.LocalShape();
  shard.rows = local[0];
  if (spec.replicated()) {
    shard.valid = shard.rows;
    return shard;
  }
  shard.start = spec.index * shard.rows;
  const int64_t vocab = spec.logical_shape[0];
  shard.valid = std::clamp<int64_t>(vocab - shard.start, 0, shard.rows);
  return shard;
}

void VocabParallelEmbeddingForward(Communicator& tp, const Tensor& ids,
                                   const Parameter& table, Tensor& out) {
  const VocabShard shard = VocabShard::For(table.spec);
  EmbeddingForward(ids, table.value, shard.start, out);
  ReduceFromTp::Forward(tp, out);
}

void VocabParallelEmbeddingToSequence(Communicator& tp, const Tensor& ids,
                                      const Parameter& table, Tensor& partial,
                                      Tensor& out) {
  const VocabShard shard = VocabShard::For(table.spec);
  EmbeddingForward(ids, table.value, shard.start, partial);
  ScatterToSequence::Forward(tp, partial, out);
}

void VocabParallelEmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                                          Parameter& table) {
  const VocabShard shard = VocabShard::For(table.spec);
  EmbeddingBackwardWeight(ids, dout, shard.start, table.grad);
}

void VocabParallelCrossEntropyForward(Communicator& tp, const Tensor& logits,
                                      const Tensor& targets,
                                      const VocabShard& shard,
                                      VocabParallelLossState& state) {
  const int64_t n = logits.dim(0);
  const DType stat = logits.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Device device = logits.device();
  auto use = [&](Tensor& t, const Shape& shape) {
    if (!t.defined()) t = Tensor::Empty(shape, stat, device);
    TRELLIS_CHECK(t.shape() == shape && t.dtype() == stat)
        << "loss statistics buffer " << t.DebugString();
  };
  use(state.row_max, {n});
  use(state.sums, {2, n});
  use(state.losses, {n});
  CrossEntropyRowMax(logits, shard.valid, state.row_max);
  if (tp.size() > 1) tp.AllReduce(state.row_max, ReduceOp::kMax);
  Tensor sumexp = state.sums.Narrow(0, 1).View({n});
  Tensor target_logit = state.sums.Narrow(1, 1).View({n});
  CrossEntropyRowSumExp(logits, shard.valid, state.row_max, sumexp);
  CrossEntropyTargetLogit(logits, targets, shard.start, shard.valid,
                          target_logit);
  if (tp.size() > 1) tp.AllReduce(state.sums, ReduceOp::kSum);
  CrossEntropyLoss(state.row_max, sumexp, target_logit, state.losses);
}

void VocabParallelCrossEntropyBackward(const Tensor& logits,
                                       const Tensor& targets,
                                       const VocabShard& shard,
                                       const VocabParallelLossState& state,
                                       double scale, Tensor& dlogits) {
  const Tensor sumexp = state.sums.Narrow(0, 1).View({logits.dim(0)});
  CrossEntropyBackward(logits, targets, shard.start, shard.valid, state.row_max,
                       sumexp, scale, dlogits);
}

}  // namespace trellis
