#include "tools/trainer/zero_memory.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "tools/trainer/bucket_layout.h"

namespace trellis {
namespace {

// Elements of the stage's gradients, all sets together.
int64_t GradientElements(const StageModel& model) {
  int64_t n = 0;
  for (const Parameter* p : model.params().all()) {
    n += NumElements(p->spec.LocalShape());
  }
  return n;
}

// `set`'s buckets over the gradients: each element as many bytes as the
// replicated plan's gradients give it (none when the stage has none).
SetBuckets GradientSetBuckets(const StageModel& model, const TrainOptions& o,
                              const BucketSet& set,
                              const MemoryPlan& replicated) {
  const int64_t n = GradientElements(model);
  if (n == 0) return {};
  return LayOutBuckets(model, o, set,
                       replicated.gradients / static_cast<size_t>(n));
}

// Level 2's bucket bytes bound at once for one set.
size_t SetBucketsInFlight(const StageModel& model, const TrainOptions& o,
                          const MemoryPlan& replicated, const BucketSet& set,
                          size_t* largest_bucket) {
  const SetBuckets buckets = GradientSetBuckets(model, o, set, replicated);
  const std::vector<GradientBuckets::LayoutItem>& items = buckets.items;
  const std::unordered_map<const Parameter*, size_t>& index = buckets.index;
  if (items.empty()) return 0;
  std::vector<std::vector<size_t>> groups;
  for (const std::vector<Parameter*>& group : model.WeightGroups()) {
    groups.emplace_back();
    for (const Parameter* p : group) {
      if (index.count(p) > 0) groups.back().push_back(index.at(p));
    }
  }
  // The last stage's head weight is written in forward, ahead of its
  // group: it is taken to be the stage's largest dense parameter (V/tp
  // rows of the model width).
  std::vector<size_t> early;
  if (model.last_stage() && !set.expert) {
    size_t head = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].elements > items[head].elements) head = i;
    }
    early.push_back(head);
  }
  return GradientBuckets::PlanBoundBytes(
      items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024),
      static_cast<int>(set.ranks), groups, early, largest_bucket);
}

}  // namespace

size_t PlanGatheredUnits(const StageModel& model, const TrainOptions& o) {
  const size_t value_bytes = o.precision == Precision::kBf16 ? 2 : 4;
  // Each unit's buckets of every set, whole.
  const std::vector<std::vector<Parameter*>> units = model.GatherUnits();
  std::vector<size_t> unit_bytes(units.size(), 0);
  for (const BucketSet& set : BucketSets(model, o)) {
    const SetBuckets buckets = LayOutBuckets(model, o, set, value_bytes);
    for (size_t u = 0; u < units.size(); ++u) {
      for (int b : buckets.UnitBuckets(units[u])) {
        unit_bytes[u] += static_cast<size_t>(buckets.padded[b]) * value_bytes;
      }
    }
  }
  // A unit holds its buckets whole; one is computed while the next is
  // gathered: at most the two largest units at once.
  size_t largest = 0, second = 0;
  for (size_t sum : unit_bytes) {
    if (sum > largest) {
      second = largest;
      largest = sum;
    } else {
      second = std::max(second, sum);
    }
  }
  return largest + second;
}

size_t PlanCheckpointIo(const StageModel& model, const TrainOptions& o,
                        const MemoryPlan& replicated) {
  if (o.zero == 0) return 0;
  const int64_t n = GradientElements(model);
  if (n == 0) return 0;
  // The replicated plan's moments (two per element) and gradients give the
  // bytes per element; the buckets are laid out over the gradients.
  const size_t moment_bytes = replicated.optimizer / (2 * n);
  const size_t gradient_bytes = replicated.gradients / n;
  size_t largest_group = 0, largest_bucket = 0;
  for (const BucketSet& set : BucketSets(model, o)) {
    const SetBuckets buckets = GradientSetBuckets(model, o, set, replicated);
    if (buckets.items.empty()) continue;
    // The I/O groups (GradientSync::CheckpointGroups): each bucket under
    // levels 1 and 2; under 3 the gather units' buckets
    // (ShardedParameters::IoGroups), set by set.
    std::vector<std::vector<int>> unit_buckets;
    if (o.zero >= 3) {
      for (const std::vector<Parameter*>& unit : model.GatherUnits()) {
        unit_buckets.push_back(buckets.UnitBuckets(unit));
      }
    }
    const std::vector<int64_t>& elements = buckets.elements;
    for (const std::vector<int>& group : GradientBuckets::UnitBucketGroups(
             static_cast<int>(elements.size()), unit_buckets)) {
      int64_t sum = 0;
      for (int b : group) sum += elements[b];
      largest_group = std::max(largest_group, static_cast<size_t>(sum));
    }
    for (int64_t padded : buckets.padded) {
      largest_bucket = std::max(largest_bucket, static_cast<size_t>(padded));
    }
  }
  // A group's whole moments, both kinds; the moments pass through one
  // bucket-sized gather buffer, a new one under levels 2 and 3 (level 1
  // gathers through its gradient buckets, already planned).
  return 2 * moment_bytes * largest_group +
         (o.zero >= 2 ? gradient_bytes * largest_bucket : 0);
}

MemoryPlan PlanZeroMemory(const StageModel& model, const TrainOptions& o,
                          const MemoryPlan& replicated,
                          bool staged_reduce_scatter) {
  // Gradients are averaged, and ZeRO shards, over dp × cp ranks; under
  // expert parallelism the experts' over the dp·cp / ep ranks holding the
  // same ones. Each set shards its share of the replicated plan's weights,
  // gradients and moments (bytes per element alike), with its own buckets
  // in flight and reduce-scatter scratch.
  const int64_t total = GradientElements(model);
  int64_t expert_elements = 0;
  for (const Parameter* p : model.params().all()) {
    if (p->expert) expert_elements += NumElements(p->spec.LocalShape());
  }
  // The experts' share of `bytes`; the dense set takes the rest.
  auto part = [&](size_t bytes, bool expert) {
    const size_t experts =
        total == 0 ? 0
                   : static_cast<size_t>(static_cast<double>(bytes) *
                                         static_cast<double>(expert_elements) /
                                         static_cast<double>(total));
    return expert ? experts : bytes - experts;
  };
  MemoryPlan plan = replicated;
  plan.weights = plan.gradients = plan.optimizer = 0;
  for (const BucketSet& set : BucketSets(model, o)) {
    MemoryPlan mine;
    mine.weights = part(replicated.weights, set.expert);
    mine.gradients = part(replicated.gradients, set.expert);
    mine.optimizer = part(replicated.optimizer, set.expert);
    size_t largest_bucket = 0;
    const size_t in_flight =
        o.zero >= 2
            ? SetBucketsInFlight(model, o, replicated, set, &largest_bucket)
            : 0;
    const size_t ranks = static_cast<size_t>(set.ranks);
    size_t staging = 0;
    if (staged_reduce_scatter && ranks > 1) {
      staging = o.zero == 1 ? (mine.gradients + ranks - 1) / ranks
                            : GradientBuckets::kMaxInFlight *
                                  ((largest_bucket + ranks - 1) / ranks);
    }
    mine = ShardOverDp(mine, o.zero, set.ranks, in_flight, staging, 0);
    plan.weights += mine.weights;
    plan.gradients += mine.gradients;
    plan.optimizer += mine.optimizer;
  }
  // Level 3's gathered units: two at once, every set's buckets of each.
  if (o.zero >= 3) {
    plan.weights += std::min(replicated.weights, PlanGatheredUnits(model, o));
  }
  plan.checkpoint = PlanCheckpointIo(model, o, replicated);
  return plan;
}

}  // namespace trellis
