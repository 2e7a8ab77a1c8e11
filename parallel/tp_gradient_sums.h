// Gradient sums over tensor-parallel ranks that follow the data-parallel
// sync: the sequence-parallel norms' partial gradients (each tp rank saw its
// own rows) and pieces replicated over sub-groups of tp
// (SumReplicatedGradients), on whatever gradient elements the sync left.
//
// Without ZeRO every parameter's gradient is whole. Under ZeRO
// (GradSync::kReduceScatter, kShardGradients) only this rank's block of
// each bucket holds averaged gradients, and under kShardGradients nothing
// else exists any more; so the sums run on the owned blocks
// (OwnedGradientRanges). That is correct because the dp average and the tp
// sums commute, and because the tp ranks of a (dp rank, stage) own the same
// elements: their buckets are laid out alike (the same parameters in the
// same ready order, with local shapes that ShardSpec makes independent of
// the tp index), and CheckRangesMatchOverTp verifies it once at start. It
// is the cheap way: one sum per step of 1/dp of the elements, where summing
// before the reduce-scatters would add one per microbatch of all of them.
//
// Thread safety: none; the training thread calls these.
#ifndef TRELLIS_PARALLEL_TP_GRADIENT_SUMS_H_
#define TRELLIS_PARALLEL_TP_GRADIENT_SUMS_H_

#include <vector>

#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/parameter.h"
#include "parallel/replicas.h"

namespace trellis {

// The gradient elements `buckets` leave current after Wait(), each with
// its tensor (GradRange::grad): every member's part of its bucket's Shard,
// bucket by bucket in member order; whole gradients under kAllReduce.
std::vector<GradRange> OwnedGradientRanges(const GradientBuckets& buckets);

// Each of `params`' whole gradient as one range.
std::vector<GradRange> WholeGradientRanges(
    const std::vector<Parameter*>& params);

// Sums over `tp` the elements of `ranges` that belong to `partial`: one
// all-reduce per such range, all launched before the first is waited on.
// Collective over tp. REQUIRES: every tp rank passes the same ranges.
void SumPartialGradients(Communicator& tp,
                         const std::vector<Parameter*>& partial,
                         const std::vector<GradRange>& ranges);

// TRELLIS_CHECKs that every rank of `tp` holds the same ranges (by the
// parameters' places in `params`, and begin and end): what the sums above
// require. Collective over tp (one all-reduce of two integers).
void CheckRangesMatchOverTp(Communicator& tp,
                            const std::vector<Parameter*>& params,
                            const std::vector<GradRange>& ranges);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_TP_GRADIENT_SUMS_H_
