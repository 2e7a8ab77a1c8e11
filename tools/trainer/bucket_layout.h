// The trainer's gradient buckets of one stage as GradientSync lays them out
// (gradient_sync.cc), from the stage's declared parameters alone (no tensor
// need exist): for the memory plan (zero_memory.h) and the planner's
// traffic (tools/plan/stage_facts.cc).
//
// The rules: each set's parameters in gradient-ready order; under ZeRO
// (level >= 1) the tied embedding alone in its bucket and each bucket
// padded to a multiple of the set's ranks; under level 3 a bucket starting
// at each weight group's first parameter (StageModel::WeightGroupStarts).
// Thread safety: pure functions of their arguments.
#ifndef TRELLIS_TOOLS_TRAINER_BUCKET_LAYOUT_H_
#define TRELLIS_TOOLS_TRAINER_BUCKET_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "tools/options/options.h"
#include "tools/trainer/stage_model.h"

namespace trellis {

// A set of gradient buckets: the dense parameters' over the dp·cp ranks,
// or under expert parallelism the experts' over the dp·cp / ep ranks
// holding the same ones.
struct BucketSet {
  bool expert = false;
  int64_t ranks = 1;  // over which the buckets are padded and sharded
};

// The stage's bucket sets: the dense one, and the experts' if it holds any.
std::vector<BucketSet> BucketSets(const StageModel& model,
                                  const TrainOptions& o);

// Where the buckets break, as GradientBuckets takes it: under ZeRO the
// tied embedding alone in its bucket (so the first and last stage own the
// same elements of it); under ZeRO-3 each weight group's first parameter
// starting a bucket (ZeRO-3 gathers bucket by bucket: none spans two
// groups).
struct BucketBreaks {
  std::vector<const Parameter*> alone, starts;
};
BucketBreaks BucketBreaksOf(const StageModel& model, const TrainOptions& o);

// One set's buckets.
struct SetBuckets {
  std::vector<const Parameter*> params;            // the set's, in ready order
  std::vector<GradientBuckets::LayoutItem> items;  // one per parameter
  std::unordered_map<const Parameter*, size_t> index;  // parameter → item
  std::vector<int64_t> elements;        // each bucket's, unpadded
  std::vector<int64_t> padded;          // each bucket's, padded under ZeRO
  std::vector<int> of_item;             // each item's bucket
  std::vector<int64_t> offset_of_item;  // its first element in its bucket

  // The distinct buckets that `unit`'s parameters of this set lie in.
  std::vector<int> UnitBuckets(const std::vector<Parameter*>& unit) const;
};

// `set`'s buckets, each gradient element `element_bytes` bytes (as the
// bucket size --dp_bucket_mb counts them).
SetBuckets LayOutBuckets(const StageModel& model, const TrainOptions& o,
                         const BucketSet& set, size_t element_bytes);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_BUCKET_LAYOUT_H_
