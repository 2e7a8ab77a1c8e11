// GradientBuckets: data-parallel gradient averaging in buckets that overlap
// the backward pass.
//
// Parameters are grouped, in the order their gradients become final during
// backward, into buckets of about `bucket_bytes`. Each bucket owns one flat
// buffer and the parameters' `grad` tensors become views into it, so a
// bucket is all-reduced (average over the dp group) without copies. The
// trainer reports each parameter as ready once its gradient is final for the
// step (after the last microbatch's weight-gradient work); a bucket whose
// parameters are all ready launches its non-blocking all-reduce at once.
// Wait() finishes every bucket before the optimizer runs.
//
// GradSync::kReduceScatter (ZeRO) pads each bucket to a multiple of the dp
// size and reduce-scatters it instead (average, in place): once Wait()
// returns, only this rank's block of each bucket, Shard(b), holds the
// averaged gradients; the rest of the bucket holds this rank's own sums and
// may be reused (the trainer all-gathers updated weights through it).
// GradSync::kShardGradients (ZeRO-2) lays the buckets out the same way but
// keeps only this rank's block of each, Shard(b), as a float accumulator.
// A bucket's full buffer exists only while gradients are written into it:
// BeforeWrite binds it (zeroed; the parameters' grads become views of it),
// and once AfterWrite has seen each of its parameters it is reduce-
// scattered (average) at once; when that finishes its block is added to
// Shard(b) and the buffer is released (the grads become undefined). So a
// bucket is reduce-scattered once per microbatch, and at most
// kMaxInFlight reduce-scatters run at once (launching another first
// finishes the oldest). MarkReady is ignored; Wait() finishes every bucket.
// Parameters listed as `alone` get a bucket of their own, so ranks with
// different neighbours in their buckets (the tied embedding on the first and
// last pipeline stage) own the same elements of it. Parameters listed in
// `starts` begin a new bucket (ZeRO-3 starts one at each weight group, so
// that no bucket spans two of the units its weights are gathered in).
//
// With a dp group of one rank nothing is communicated.
// Thread safety: none; the training thread drives it.
#ifndef TRELLIS_PARALLEL_DATA_PARALLEL_H_
#define TRELLIS_PARALLEL_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parameter.h"

namespace trellis {

enum class GradSync { kAllReduce, kReduceScatter, kShardGradients };

class GradientBuckets {
 public:
  // A parameter's place in its bucket: elements [offset, offset + numel).
  struct Member {
    Parameter* param;
    int64_t offset;
  };

  // `ready_order`: each parameter once, first-final first. Rebinds their
  // grads to bucket views, keeping their content; makes the grads of
  // parameters that have none (zeroed). A parameter not materialized yet
  // (ZeRO-3 never makes its weights whole) must be in `declared`, which
  // gives its value's dtype and device.
  GradientBuckets(const std::vector<Parameter*>& ready_order,
                  int64_t bucket_bytes, Communicator& dp,
                  GradSync sync = GradSync::kAllReduce,
                  const std::vector<const Parameter*>& alone = {},
                  const std::vector<const Parameter*>& starts = {},
                  const std::vector<ParameterDeclaration>& declared = {});

  // Reduce-scatters running at once under kShardGradients.
  static constexpr int kMaxInFlight = 2;

  // A parameter as the bucket layout sees it: its gradient's elements and
  // bytes per element, a key of its gradient's dtype and device (buckets
  // hold one kind), and whether it gets a bucket of its own.
  struct LayoutItem {
    int64_t elements = 0;
    size_t element_bytes = 4;
    int kind = 0;
    bool alone = false;
    bool starts = false;  // begins a new bucket
  };
  // The buckets the constructor makes of `items` (in ready order): each
  // bucket's item indices in order.
  static std::vector<std::vector<size_t>> Layout(
      const std::vector<LayoutItem>& items, int64_t bucket_bytes);
  // For planning memory without tensors: a bound on the bucket bytes
  // kShardGradients holds at once, when gradients are written in `groups`
  // (item indices; the chunks' WeightGroups) and the items in `early` are
  // written ahead of their group (the head's weight, in forward):
  // kMaxInFlight of the largest buckets being reduce-scattered, the buckets
  // of `early`, and the buckets that the widest group touches. `largest`
  // (if not null) gets the largest bucket's bytes.
  static size_t PlanBoundBytes(const std::vector<LayoutItem>& items,
                               int64_t bucket_bytes, int dp,
                               const std::vector<std::vector<size_t>>& groups,
                               const std::vector<size_t>& early,
                               size_t* largest = nullptr);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  GradSync sync() const { return sync_; }
  Communicator& dp() const { return dp_; }
  // Bucket b's flat gradients (padded to a multiple of the dp size unless
  // kAllReduce; undefined under kShardGradients while unbound) and its
  // parameters in order.
  Tensor& flat(int b) { return buckets_[b].flat; }
  const std::vector<Member>& members(int b) const {
    return buckets_[b].members;
  }
  // Bucket b's elements (padding included) and where this rank's block
  // starts in them.
  int64_t bucket_elements(int b) const { return buckets_[b].elements; }
  int64_t block_start(int b) const;
  // This rank's block of bucket b: all of it under kAllReduce; its own
  // accumulator under kShardGradients.
  Tensor Shard(int b) const;
  // Whether `p` is in one of the buckets, and the bucket holding it.
  bool Holds(const Parameter* p) const { return bucket_of_.count(p) > 0; }
  int BucketOf(const Parameter* p) const;
  // Those of `params` that are in the buckets, in order.
  std::vector<Parameter*> Held(const std::vector<Parameter*>& params) const;
  // The distinct buckets holding `params`, in the order first met.
  std::vector<int> BucketsOf(const std::vector<Parameter*>& params) const;
  // Bucket b's parameters, in order.
  std::vector<Parameter*> BucketParameters(int b) const;
  // Groups of whole buckets, each bucket in exactly one: each unit's
  // buckets (`unit_buckets`, as BucketsOf gives them) that no earlier unit
  // took, then every bucket left, alone. ZeRO-3's checkpoint I/O walks
  // these (ShardedParameters::IoGroups), and the memory plan sizes them.
  static std::vector<std::vector<int>> UnitBucketGroups(
      int num_buckets, const std::vector<std::vector<int>>& unit_buckets);
  // A buffer of bucket b's size to all-gather through: flat(b), or under
  // kShardGradients a new one the caller drops when done.
  Tensor GatherBuffer(int b) const;
  // Elements of the gradients, padding included.
  int64_t elements() const;
  // Zeroes every gradient and forgets readiness: call at each step's start.
  void StartStep();
  // `p`'s gradient is final for this step.
  void MarkReady(const Parameter* p);
  // kShardGradients (no-ops otherwise): `group`'s gradients are about to
  // be added to, and the microbatch's additions to them are done.
  void BeforeWrite(const std::vector<Parameter*>& group);
  void AfterWrite(const std::vector<Parameter*>& group);
  // Launches buckets not yet launched, waits for all; returns the seconds
  // spent waiting.
  double Wait();
  // Buckets launched before Wait() in the last step (overlapped).
  int launched_early() const { return launched_early_; }
  // kShardGradients: the most bytes of bucket buffers bound at once.
  size_t peak_bound_bytes() const { return peak_bound_bytes_; }

 private:
  struct Bucket {
    Tensor flat;
    Tensor shard;  // this rank's block of flat (kShardGradients: its own)
    int64_t elements = 0;
    DType dtype = DType::kF32;
    Device device;
    std::vector<Member> members;
    int params = 0;
    int ready = 0;
    std::vector<bool> written;  // kShardGradients: AfterWrite since bound
    std::unique_ptr<Request> request;
  };
  // A bucket over group's gradients, of dtype on device: its flat buffer
  // (padded to a multiple of dp when sharded) with the grads viewing it and
  // its shard this rank's block, or (kShardGradients) the block alone.
  Bucket MakeBucket(const std::vector<Parameter*>& group, DType dtype,
                    Device device);
  void Launch(Bucket& bucket);
  // kShardGradients: a zeroed buffer for bucket b, the grads viewing it.
  void Bind(int b);
  // kShardGradients: waits for b's reduce-scatter, adds its block to the
  // accumulator, releases the buffer.
  void Finish(int b);

  Communicator& dp_;
  GradSync sync_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, int> bucket_of_;
  std::vector<int> in_flight_;  // kShardGradients, oldest first
  int launched_early_ = 0;
  size_t bound_bytes_ = 0, peak_bound_bytes_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_DATA_PARALLEL_H_
