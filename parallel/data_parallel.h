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
// Parameters listed as `alone` get a bucket of their own, so ranks with
// different neighbours in their buckets (the tied embedding on the first and
// last pipeline stage) own the same elements of it.
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

enum class GradSync { kAllReduce, kReduceScatter };

class GradientBuckets {
 public:
  // A parameter's place in its bucket: elements [offset, offset + numel).
  struct Member {
    Parameter* param;
    int64_t offset;
  };

  // `ready_order`: each parameter once, first-final first. Rebinds their
  // grads to bucket views, keeping their content; makes the grads of
  // parameters that have none (zeroed).
  GradientBuckets(const std::vector<Parameter*>& ready_order,
                  int64_t bucket_bytes, Communicator& dp,
                  GradSync sync = GradSync::kAllReduce,
                  const std::vector<const Parameter*>& alone = {});

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  GradSync sync() const { return sync_; }
  Communicator& dp() { return dp_; }
  // Bucket b's flat gradients (padded to a multiple of the dp size under
  // kReduceScatter) and its parameters in order.
  Tensor& flat(int b) { return buckets_[b].flat; }
  const std::vector<Member>& members(int b) const {
    return buckets_[b].members;
  }
  // This rank's block of bucket b: all of it under kAllReduce.
  Tensor Shard(int b) const;
  // Elements of the gradients, padding included.
  int64_t elements() const;
  // Zeroes every gradient and forgets readiness: call at each step's start.
  void StartStep();
  // `p`'s gradient is final for this step.
  void MarkReady(const Parameter* p);
  // Launches buckets not yet launched, waits for all; returns the seconds
  // spent waiting.
  double Wait();
  // Buckets launched before Wait() in the last step (overlapped).
  int launched_early() const { return launched_early_; }

 private:
  struct Bucket {
    Tensor flat;
    Tensor shard;  // this rank's block of flat
    std::vector<Member> members;
    int params = 0;
    int ready = 0;
    std::unique_ptr<Request> request;
  };
  void Launch(Bucket& bucket);

  Communicator& dp_;
  GradSync sync_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, int> bucket_of_;
  int launched_early_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_DATA_PARALLEL_H_
