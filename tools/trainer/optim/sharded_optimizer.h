// ShardedOptimizer: AdamW with its state sharded over the data-parallel
// group (ZeRO levels 1 and 2).
//
// The gradient buckets (GradientBuckets in GradSync::kReduceScatter or
// kShardGradients) lay every parameter's gradient out in flat buckets,
// each padded to a multiple of the dp size, and reduce-scatter them during
// backward: dp rank r ends up with the averaged gradients of block r of
// every bucket (equal blocks, a contiguous 1/dp of each bucket), Shard(b).
// This optimizer owns the same blocks: it keeps the AdamW moments (float32;
// float64 for float64 parameters) of its blocks only, and steps only the
// weight elements in them (the full-precision weights: the float32 master
// of a bfloat16 value). A block cuts parameters anywhere; each piece of a
// parameter that falls in it is one segment, stepped with that parameter's
// weight decay.
//
// One step: the gradient norm sums the squares of the owned segments of
// primary parameters and reduces them over dp, tp and pp at once (each
// logical element is counted once, as Optimizer does); clipping and AdamW
// follow on the segments; then each rank writes its updated weights into
// its block of a bucket-sized buffer and the buffers are all-gathered over
// dp, and each parameter's weights are copied back out (bfloat16 values
// refreshed from their masters). Under kReduceScatter the buffers are the
// (spent) gradient buckets and every gather is launched before the first
// is waited on; under kShardGradients they are allocated for the gather,
// at most GradientBuckets::kMaxInFlight at once. The elementwise numbers
// are Optimizer's; only the norm's summation order differs.
//
// Memory: moments are 1/dp of Optimizer's plus the buckets' padding (under
// dp per bucket); weights stay whole, unless the weights are sharded too
// (ZeRO-3, `sharded`): then the owned blocks of ShardedParameters are what
// AdamW steps, bfloat16 values are rounded from them block by block, and
// nothing is gathered after the step. Checkpoint I/O then makes the
// weights whole one group at a time (ShardedParameters::IoGroups); the
// moments' shapes come from the parameters' specs, since their values
// may be released. Checkpoints stay layout-free, one part at a time
// (MomentsInParts: the caller walks groups of parameters whose buckets
// no other group shares): BeginCheckpointPart(kSave) gathers, through
// bucket-sized buffers, the part's whole moments of the parameters this
// rank saves (SavesMoments: every dp-th, so the dp ranks write the
// optimizer file together); kLoad allocates the part's moments to be read
// and EndCheckpointPart(kLoad) keeps their owned segments, so a checkpoint
// moves between ZeRO levels and layouts and no moment is whole outside its
// part's I/O, at every level.
//
// Under expert parallelism the experts' gradients lie in buckets of their
// own over the expert-data group (the dp ranks holding the same experts,
// dp / ep of them): the optimizer steps several such sets of buckets
// (ShardedSet), each owning the blocks of its buckets over its own group
// and gathering weights and moments there. The norm still takes one
// reduction over the first set's group (dp): the expert-data groups tile
// it, so the squares of every rank's owned blocks add up to each logical
// element once.
//
// Thread safety: none; the training thread drives it. Step and the
// checkpoint calls are collective over dp (and Step over tp and pp).
#ifndef TRELLIS_TOOLS_TRAINER_OPTIM_SHARDED_OPTIMIZER_H_
#define TRELLIS_TOOLS_TRAINER_OPTIM_SHARDED_OPTIMIZER_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/sharded_parameters.h"
#include "tools/trainer/optim/optimizer.h"

namespace trellis {

// One set of gradient buckets over its own group, and under ZeRO-3 their
// sharded weights (else null).
struct ShardedSet {
  GradientBuckets* buckets = nullptr;
  ShardedParameters* sharded = nullptr;
};

class ShardedOptimizer : public Optimizer {
 public:
  // REQUIRES: `buckets` reduce-scatter (kReduceScatter or kShardGradients)
  // and hold every parameter of `params`; both outlive this.
  ShardedOptimizer(OptimizerConfig config, const ParameterSet& params,
                   GradientBuckets& buckets,
                   ShardedParameters* sharded = nullptr);
  // The same over several sets: each parameter in exactly one; the first
  // set's group is dp, and the others' groups tile it.
  ShardedOptimizer(OptimizerConfig config, const ParameterSet& params,
                   std::vector<ShardedSet> sets);

  // The norm of this rank's gradient blocks, reduced over dp, tp and pp.
  double StageGradSquares(Communicator& tp) const override;
  StepReport Apply(double grad_norm) override;
  void PoisonGradient() override;
  void BeginCheckpointIo(CheckpointIo io) override;
  void EndCheckpointIo(CheckpointIo io) override;
  // Checkpoint I/O makes no moment whole outside a part:
  // BeginCheckpointPart(kSave) gathers the part's buckets of moments and
  // keeps the whole moments this rank saves, BeginCheckpointPart(kLoad)
  // makes the part's to be read; the Ends keep the loaded owned segments
  // and drop them.
  void BeginCheckpointPart(CheckpointIo io,
                           const std::vector<Parameter*>& part) override;
  void EndCheckpointPart(CheckpointIo io,
                         const std::vector<Parameter*>& part) override;
  // Parameter i's moments are saved by rank i mod n of its set's group
  // (of n ranks).
  bool SavesOwnMoments() const override { return true; }
  bool SavesMoments(size_t i) const override;
  bool MomentsInParts() const override { return true; }

  // Elements of each moment this rank keeps (its blocks, padding included).
  int64_t shard_elements() const;
  // The most bytes of whole moments (both kinds) held at once by
  // checkpoint I/O so far.
  size_t peak_whole_moment_bytes() const { return peak_whole_moment_bytes_; }

 private:
  // A set's buckets, sharded weights, and AdamW moments per bucket (its
  // block's length).
  struct Set {
    GradientBuckets* buckets;
    ShardedParameters* sharded;
    std::vector<Tensor> m_blocks, v_blocks;
  };
  // A piece of parameter `param` (index in params().all()) that lies in
  // this rank's block of bucket `bucket` of set `set`.
  struct Segment {
    size_t param;
    int set;
    int bucket;
    int64_t param_offset;  // in the parameter's flat elements
    int64_t block_offset;  // in the block
    int64_t length;
  };

  // Each segment's view of this rank's reduced gradient block.
  std::vector<Tensor> GradientPieces() const;
  // The segment's elements of a tensor in its parameter's shape.
  static Tensor Piece(const Tensor& whole, const Segment& s);
  // This rank's block of `buffer`, a buffer of bucket b's size in `set`.
  static Tensor Block(const Set& set, const Tensor& buffer, int b);
  // Copies each bucket's owned weights into its block, all-gathers the
  // buckets over the set's group and copies every parameter's weights out.
  void GatherWeights(int set);
  // A zeroed whole moment of `p` (its gradient bucket's dtype and device).
  Tensor NewMoment(const Parameter& p) const;
  // Copies into the owned blocks the segments of every defined moment.
  void KeepLoadedMoments();
  // Gathers each set's blocks of the buckets holding `part` into the
  // defined whole moments (m() and v()).
  void GatherMoments(const std::vector<Parameter*>& part);
  // The set holding `p`.
  const Set& SetOf(const Parameter& p) const;

  std::vector<Set> sets_;
  std::vector<Segment> segments_;
  std::unordered_map<const Parameter*, size_t> index_;  // in params().all()
  std::vector<int> set_of_;                             // per parameter
  size_t peak_whole_moment_bytes_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_OPTIM_SHARDED_OPTIMIZER_H_
