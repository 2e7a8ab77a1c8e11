// Gradients of pieces replicated over sub-groups of tensor-parallel ranks
// (ShardSpec::ReplicatedPieces: a grouped-query projection's key/value
// heads when tp exceeds them).
//
// Each replica's gradient first holds its own rank's contribution only (a
// shared key/value head's gradient from that rank's query heads), while
// the logical gradient is the sum over the replicas. SumReplicatedGradients
// makes every replica hold that sum, bit-identical across them, so the
// replicas, which start equal, stay equal after every optimizer step. The
// gradient norm then counts each replicated element once, on its owner:
// UnownedGradSquares is what a rank leaves out.
//
// How the sum is carried: every rank writes its pieces at their logical
// places in a zeroed buffer of the whole blocks and the buffer is
// all-reduced (sum) over tp. A piece's elements thus receive the sum over
// exactly the ranks that hold it (the others add exact zeros), and every
// rank receives the same bits. One all-reduce serves all parameters; it
// carries whole blocks, n_kv_heads times a piece, instead of a piece over
// a sub-group communicator: the key/value blocks are small, and no group
// beyond tp is needed.
//
// Both also work on flat ranges of the gradients (GradRange) where a rank
// holds only some elements, as under ZeRO, which keeps the owned block of
// each reduce-scattered bucket: the sum then carries the replicated
// elements of the ranges only. Its buffer is laid out by the ranges, so the
// tp ranks must pass the same ranges (same parameters, same [begin, end));
// they do when their bucket layouts match (parallel/tp_gradient_sums.h).
//
// Thread safety: none; the training thread calls these.
#ifndef TRELLIS_PARALLEL_REPLICAS_H_
#define TRELLIS_PARALLEL_REPLICAS_H_

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parameter.h"

namespace trellis {

// Flat elements [begin, end) of one parameter's gradient, and where they
// are: `grad`, a flat tensor of end - begin elements (a ZeRO shard's
// piece), or when undefined param->grad's elements [begin, end).
struct GradRange {
  const Parameter* param = nullptr;
  int64_t begin = 0;
  int64_t end = 0;
  Tensor grad = {};
};

// Replaces the gradient of each replicated piece of `params` by its sum
// over the ranks holding it. Collective over `tp`: every rank of the group
// passes parameters with the same specs (one pipeline stage's). Does
// nothing (no communication) when no parameter has replicated pieces or tp
// is one rank. REQUIRES: the gradients of parameters with replicated pieces
// share one dtype and device.
void SumReplicatedGradients(Communicator& tp,
                            const std::vector<Parameter*>& params);
// The same on the elements in `ranges` only; the rest is left alone. One
// all-reduce of the ranges' replicated elements (times the pieces per
// block). REQUIRES: every rank of `tp` passes the same ranges in the same
// order (parameters of the same specs, the same begin and end).
void SumReplicatedGradients(Communicator& tp,
                            const std::vector<GradRange>& ranges);

// The sum of squares (float64) of the gradient elements in `ranges` that
// lie in replicated pieces this rank does not own: what a rank subtracts
// from its sum of squares so that each logical element counts once. 0
// without replicated pieces (no device work).
double UnownedGradSquares(const std::vector<GradRange>& ranges);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_REPLICAS_H_
