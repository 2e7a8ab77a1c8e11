// SequenceSplit: where a transformer block's row tensors live over its
// tensor-parallel group, and the communication that moves them between
// the two places.
//
// Without sequence parallelism every tp rank holds all N = B·T rows of the
// (N, C) tensors between the tensor-parallel layers (norm inputs and
// outputs, residuals, the block output): a row-parallel layer's partial sums
// are all-reduced, and so is a column-parallel layer's input gradient. With
// it (`--sequence_parallel`, Megatron's) tp rank t holds only rows
// [t·N/tp, (t+1)·N/tp) of those tensors: the norm runs on them, an
// all-gather feeds the column-parallel layer the whole rows, and a
// reduce-scatter replaces the row-parallel all-reduce; backward the
// reduce-scatter and all-gather trade places (parallel/tensor_parallel.h).
//
// The split is over the flattened B·T rows, not within each sequence: rows
// are (B, T)-major here, so one rank's block is contiguous only that way,
// and all-gathering the blocks in rank order gives the (N, C) tensor with
// no reordering. Norms, residuals and the loss are row-wise, so which rows
// a rank holds does not matter to them; attention sees whole sequences
// through the gathered rows. REQUIRES: tp divides B·T.
//
// With one part (no sequence parallelism) every call does what the block
// did before: the local rows are all rows, gathers are copies or nothing.
// Thread safety: immutable.
#ifndef TRELLIS_TRANSFORMER_SEQUENCE_SPLIT_H_
#define TRELLIS_TRANSFORMER_SEQUENCE_SPLIT_H_

#include <cstdint>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "transformer/chunk_options.h"

namespace trellis {

class SequenceSplit {
 public:
  // All rows on every rank.
  SequenceSplit() = default;
  // Split over tp when `sequence_parallel` and tp.size > 1.
  SequenceSplit(TpPlace tp, bool sequence_parallel);

  bool on() const { return parts_ > 1; }
  int64_t parts() const { return parts_; }
  // Rows held here of `n` rows.
  int64_t Local(int64_t n) const;
  // The first of them.
  int64_t First(int64_t n) const { return index_ * Local(n); }
  // This rank's rows of `full` (N, ...); `full` itself without the split.
  Tensor Mine(const Tensor& full) const;

  // A column-parallel layer's input: Mine(full) was written; fills the rest
  // (all-gather). Nothing without the split.
  void GatherInput(Communicator& tp, Tensor& full) const;
  // y (local rows) = a row-parallel layer's output: reduce-scatter of its
  // partial sums through `partial` (N, M) with the split, else all-reduce
  // in y (N, M) itself.
  void RowOutput(Communicator& tp, const RowParallelLinear& layer,
                 const Tensor& x, Tensor& partial, Tensor& y) const;
  // y = residual + RowOutput(x): in the layer's GEMM without the split
  // (RowParallelLinear::ForwardResidual), else after the reduce-scatter.
  // residual and y (local rows) are distinct.
  void RowOutputResidual(Communicator& tp, const RowParallelLinear& layer,
                         const Tensor& x, const Tensor& residual,
                         Tensor& partial, Tensor& y) const;
  // y (local rows) = the sum over tp of partial sums (N, M) the caller
  // wrote into `sums`: `partial` with the split (reduce-scatter into y),
  // else y itself (all-reduce in place). `sums` is one of the two.
  void ReducePartial(Communicator& tp, Tensor& sums, Tensor& y) const;
  // A column-parallel layer's input gradient `dfull` (N, C), partial over
  // tp: afterwards Mine(dfull) holds its sum (reduce-scatter in place, or
  // all-reduce without the split).
  void ReduceInputGrad(Communicator& tp, Tensor& dfull) const;
  // A row-parallel layer's output gradient: `dfull` (N, C) = every rank's
  // `dlocal` (all-gather; `dlocal` may be Mine(dfull)), or a copy of
  // `dlocal` without the split (nothing if they are one buffer).
  void GatherOutputGrad(Communicator& tp, const Tensor& dlocal,
                        Tensor& dfull) const;

 private:
  int64_t parts_ = 1;
  int64_t index_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_SEQUENCE_SPLIT_H_
