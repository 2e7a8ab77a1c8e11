// Tensor-parallel mappings and layers (Megatron-style).
//
// Two conjugate mappings carry all tensor-parallel communication:
//   CopyToTp      identity forward, all-reduce (sum) backward
//   ReduceFromTp  all-reduce (sum) forward, identity backward
// A column-parallel linear layer is CopyToTp followed by a local matmul with
// a column shard of the weight; a row-parallel one is a local matmul with a
// row shard followed by ReduceFromTp. An attention or MLP block built as
// column → local work → row issues exactly one all-reduce forward and one
// backward. Groups of one rank issue none.
//
// Sequence parallelism (Megatron's) adds the other conjugate pair. Outside
// the tensor-parallel layers (norms, residuals) each tp rank then holds a
// contiguous 1/tp block of the (N, C) rows, rank t rows
// [t·N/tp, (t+1)·N/tp), and
//   GatherFromSequence  all-gather forward, reduce-scatter backward
//   ScatterToSequence   reduce-scatter forward, all-gather backward
// feed a column-parallel layer the whole rows and turn a row-parallel
// layer's partial sums into this rank's block of their sum. A reduce-scatter
// and an all-gather of one buffer move what its all-reduce does, so a block
// built as gather → column → local work → row → scatter communicates as
// much as without sequence parallelism, and holds 1/tp of the rows between
// its layers.
//
// Layers do not own parameters or activations; they are handed both, so a
// model can keep state for several microbatches at once. Backward is split
// into BackwardInput (activation gradients, the pipeline's B) and
// BackwardWeight (parameter gradients, its W). Gradients accumulate.
#ifndef TRELLIS_PARALLEL_TENSOR_PARALLEL_H_
#define TRELLIS_PARALLEL_TENSOR_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "framework/kernels/matmul.h"
#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"

namespace trellis {

// f: identity forward / all-reduce backward.
struct CopyToTp {
  static void Forward(Communicator& tp, Tensor& x) {}
  static void Backward(Communicator& tp, Tensor& dx);
};

// g: all-reduce forward / identity backward.
struct ReduceFromTp {
  static void Forward(Communicator& tp, Tensor& x);
  static void Backward(Communicator& tp, Tensor& dx) {}
};

// g' (sequence parallel): `full` (N, ·) holds this rank's rows in its block;
// Forward fills the other ranks' blocks (all-gather in place). Backward
// reduce-scatters partial sums in place: afterwards this rank's block of
// `dfull` holds the sum over tp (the rest is stale).
// REQUIRES: N divisible by tp.size().
struct GatherFromSequence {
  static void Forward(Communicator& tp, Tensor& full);
  static void Backward(Communicator& tp, Tensor& dfull);
};

// f' (sequence parallel): Forward writes `local` (N/tp, ·) = this rank's
// rows of the sum over tp of `partial` (N, ·); Backward gathers every
// rank's `dlocal` (N/tp, ·) into `dfull` (N, ·). `local` may be this rank's
// block of `partial`, `dlocal` this rank's block of `dfull`.
struct ScatterToSequence {
  static void Forward(Communicator& tp, const Tensor& partial, Tensor& local);
  static void Backward(Communicator& tp, const Tensor& dlocal, Tensor& dfull);
};

// This rank's block of the rows of `full` (N, ...) when the rows are split
// over `parts` ranks (rank `index`); `full` itself for one part.
// REQUIRES: N divisible by parts.
Tensor SequenceRows(const Tensor& full, int64_t parts, int64_t index);

// Each layer states how its parameters are split over the tp group (the
// *Spec functions: a model declares its parameters with them) and checks at
// construction that the parameters it is given are split that way, so a
// weight cut along the wrong dimension fails when the layer is built
// instead of computing a wrong answer. Both layers also come without a bias
// (Llama's projections): built from the weight alone.

// y (N, M/tp) = x (N, K) @ W[:, shard] + b[shard]. Weight (K, M/tp).
class ColumnParallelLinear {
 public:
  // The weight's columns are split over `parts` ranks (this is rank
  // `index`); with `groups` > 1 they are `groups` equal blocks split each
  // (c_attn's [Q | K | V]: each rank takes its heads from every block).
  static ShardSpec WeightSpec(int64_t in, int64_t out, int64_t parts,
                              int64_t index, int64_t groups = 1);
  // Columns in unequal blocks of `group_sizes` (summing to out), each split
  // over `parts` ranks: a grouped-query [Q | K | V] projection. With
  // `group_parts`, block g is cut into group_parts[g] pieces only and each
  // piece replicated over parts / group_parts[g] ranks (key/value heads
  // fewer than tp ranks; ShardSpec::SplitGroups).
  static ShardSpec WeightSpec(int64_t in, int64_t parts, int64_t index,
                              std::vector<int64_t> group_sizes,
                              std::vector<int64_t> group_parts = {});
  // The bias is split like the weight's columns.
  static ShardSpec BiasSpec(int64_t out, int64_t parts, int64_t index,
                            int64_t groups = 1);
  // REQUIRES (checked): weight and bias split as WeightSpec and BiasSpec
  // state, into the same parts.
  ColumnParallelLinear(Parameter& weight, Parameter& bias);
  // Without a bias. REQUIRES (checked): weight split as a WeightSpec states.
  explicit ColumnParallelLinear(Parameter& weight);
  void Forward(const Tensor& x, Tensor& y) const;
  // pre (N, M) = x @ W + b and out = gelu(pre), fused where the backend can
  // (cuBLASLt's GELU epilogue).
  void ForwardGelu(const Tensor& x, Tensor& pre, Tensor& out) const;
  // dx (N, K) = sum over tp of dy @ W^T. REQUIRES: dx is zero on entry
  // (the all-reduce sums its whole content).
  void BackwardInput(Communicator& tp, const Tensor& dy, Tensor& dx) const;
  void BackwardWeight(const Tensor& dy, const Tensor& x) const;

 private:
  Parameter& weight_;
  Parameter* bias_;  // Null without a bias.
};

// y (N, M) = sum over tp of x (N, K/tp) @ W[shard, :] + b. Weight (K/tp, M);
// the bias is replicated and added once, after the reduction.
class RowParallelLinear {
 public:
  // The weight's rows are split over `parts` ranks.
  static ShardSpec WeightSpec(int64_t in, int64_t out, int64_t parts,
                              int64_t index);
  // The bias is replicated.
  static ShardSpec BiasSpec(int64_t out);
  // REQUIRES (checked): weight and bias split as WeightSpec and BiasSpec
  // state.
  RowParallelLinear(Parameter& weight, Parameter& bias);
  // Without a bias. REQUIRES (checked): weight split as WeightSpec states.
  explicit RowParallelLinear(Parameter& weight);
  // y (N, M) = x @ W[shard, :] summed over tp, plus the bias (added after
  // the sum; with one tp rank, by the GEMM itself).
  void Forward(Communicator& tp, const Tensor& x, Tensor& y) const;
  // y (N, M) = residual (N, M) + Forward(x): with one tp rank in the GEMM
  // (MatmulForwardResidual), else Forward then Add. residual and y are
  // distinct.
  void ForwardResidual(Communicator& tp, const Tensor& x,
                       const Tensor& residual, Tensor& y) const;
  // Sequence parallel: partial (N, M) = x @ W[shard, :] (scratch), then y
  // (N/tp, M) = this rank's rows of the sum over tp (ScatterToSequence),
  // plus the bias.
  void ForwardToSequence(Communicator& tp, const Tensor& x, Tensor& partial,
                         Tensor& y) const;
  // dx (N, K/tp) += dy @ W^T. No communication.
  void BackwardInput(const Tensor& dy, Tensor& dx) const;
  void BackwardWeight(const Tensor& dy, const Tensor& x) const;

 private:
  Parameter& weight_;
  Parameter* bias_;  // Null without a bias.
};

// The vocabulary split over tp: rank t holds rows [t·Vp/tp, (t+1)·Vp/tp) of
// the (Vp, C) table, Vp the padded vocabulary. Ids at or beyond the logical
// vocabulary never occur; padded rows stay zero.
struct VocabShard {
  int64_t start = 0;  // First vocabulary id held here.
  int64_t rows = 0;   // Rows held (Vp / tp).
  int64_t valid = 0;  // Rows that are real vocabulary (rest is padding).
  static VocabShard For(const ShardSpec& spec);
};

// out (N, C) = table[ids], summed over tp (each rank fills its rows).
void VocabParallelEmbeddingForward(Communicator& tp, const Tensor& ids,
                                   const Parameter& table, Tensor& out);
// Sequence parallel: partial (N, C) = this rank's rows of the table
// (scratch), out (N/tp, C) = this rank's block of table[ids], the sum over
// tp (ScatterToSequence).
void VocabParallelEmbeddingToSequence(Communicator& tp, const Tensor& ids,
                                      const Parameter& table, Tensor& partial,
                                      Tensor& out);
// dtable[ids] += dout for the ids this rank holds (dout is replicated).
void VocabParallelEmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                                          Parameter& table);

// Softmax cross-entropy of vocab-parallel logits (N, Vp/tp); the full
// vocabulary's logits are never gathered. Keeps what backward needs.
struct VocabParallelLossState {
  Tensor row_max;  // (N)
  // (2, N): each row's sum of exponentials, then its target logit, so that
  // one all-reduce carries both.
  Tensor sums;
  Tensor losses;  // (N) per-token loss, identical on every tp rank
};
// Fills `state`. Undefined members are allocated; defined ones (views of
// buffers the caller reuses, as the LM head does for each chunk of rows)
// must have the shapes above and the statistics dtype (float32, float64 for
// float64 logits), and are overwritten.
void VocabParallelCrossEntropyForward(Communicator& tp, const Tensor& logits,
                                      const Tensor& targets,
                                      const VocabShard& shard,
                                      VocabParallelLossState& state);
// dlogits = scale · (softmax − onehot); may alias logits.
void VocabParallelCrossEntropyBackward(const Tensor& logits,
                                       const Tensor& targets,
                                       const VocabShard& shard,
                                       const VocabParallelLossState& state,
                                       double scale, Tensor& dlogits);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_TENSOR_PARALLEL_H_
