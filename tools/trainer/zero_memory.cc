#include "tools/trainer/zero_memory.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// The stage's gradient bucket items as the trainer lays them out (the tied
// embedding alone; under level 3 a bucket starting at each weight group),
// in ready order, with `index` mapping a parameter to its item.
std::vector<GradientBuckets::LayoutItem> BucketItems(
    const StageModel& model, const TrainOptions& o, size_t element_bytes,
    std::unordered_map<const Parameter*, size_t>& index) {
  std::vector<GradientBuckets::LayoutItem> items;
  for (const Parameter* p : model.GradientReadyOrder()) {
    index[p] = items.size();
    items.push_back(
        {NumElements(p->spec.LocalShape()), element_bytes, 0, false});
  }
  const std::string tied = FamilyOf(o.model).TiedEmbedding(o.model);
  // (Middle pipeline stages hold no embedding.)
  const Parameter* embedding =
      tied.empty() ? nullptr : model.params().Find(tied);
  if (embedding != nullptr) items[index.at(embedding)].alone = true;
  if (o.zero == 3) {
    for (const Parameter* p : model.WeightGroupStarts()) {
      items[index.at(p)].starts = true;
    }
  }
  return items;
}

// BucketItems over the gradients: each element as many bytes as the
// replicated plan's gradients give it; `elements` gets their count (no
// items when 0).
std::vector<GradientBuckets::LayoutItem> GradientItems(
    const StageModel& model, const TrainOptions& o,
    const MemoryPlan& replicated,
    std::unordered_map<const Parameter*, size_t>& index, size_t* elements) {
  std::vector<GradientBuckets::LayoutItem> items =
      BucketItems(model, o, 0, index);
  int64_t n = 0;
  for (const auto& item : items) n += item.elements;
  *elements = static_cast<size_t>(n);
  if (n == 0) return {};
  for (auto& item : items) {
    item.element_bytes = replicated.gradients / static_cast<size_t>(n);
  }
  return items;
}

}  // namespace

size_t PlanGatheredUnits(const StageModel& model, const TrainOptions& o) {
  const size_t value_bytes = o.precision == Precision::kBf16 ? 2 : 4;
  std::unordered_map<const Parameter*, size_t> index;
  const std::vector<GradientBuckets::LayoutItem> items =
      BucketItems(model, o, value_bytes, index);
  const std::vector<std::vector<size_t>> layout = GradientBuckets::Layout(
      items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024));
  std::vector<int> bucket_of(items.size());
  std::vector<size_t> bytes(layout.size());
  for (size_t b = 0; b < layout.size(); ++b) {
    int64_t elements = 0;
    for (size_t i : layout[b]) {
      elements += items[i].elements;
      bucket_of[i] = static_cast<int>(b);
    }
    const int64_t n = o.gradient_replicas();
    elements = (elements + n - 1) / n * n;
    bytes[b] = static_cast<size_t>(elements) * value_bytes;
  }
  // A unit holds its buckets whole; one is computed while the next is
  // gathered: at most the two largest units at once.
  size_t largest = 0, second = 0;
  for (const std::vector<Parameter*>& unit : model.GatherUnits()) {
    std::vector<int> seen;
    size_t sum = 0;
    for (const Parameter* p : unit) {
      const int b = bucket_of[index.at(p)];
      if (std::find(seen.begin(), seen.end(), b) != seen.end()) continue;
      seen.push_back(b);
      sum += bytes[b];
    }
    if (sum > largest) {
      second = largest;
      largest = sum;
    } else {
      second = std::max(second, sum);
    }
  }
  return largest + second;
}

size_t PlanBucketsInFlight(const StageModel& model, const TrainOptions& o,
                           const MemoryPlan& replicated,
                           size_t* largest_bucket) {
  // From the declared shapes: the parameters need not exist yet.
  std::unordered_map<const Parameter*, size_t> index;
  size_t elements = 0;
  const std::vector<GradientBuckets::LayoutItem> items =
      GradientItems(model, o, replicated, index, &elements);
  if (elements == 0) return 0;
  std::vector<std::vector<size_t>> groups;
  for (const std::vector<Parameter*>& group : model.WeightGroups()) {
    groups.emplace_back();
    for (const Parameter* p : group) groups.back().push_back(index.at(p));
  }
  // The last stage's head weight is written in forward, ahead of its
  // group: it is taken to be the stage's largest parameter (V/tp rows of
  // the model width).
  std::vector<size_t> early;
  if (model.last_stage()) {
    size_t head = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].elements > items[head].elements) head = i;
    }
    early.push_back(head);
  }
  return GradientBuckets::PlanBoundBytes(
      items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024),
      static_cast<int>(o.gradient_replicas()), groups, early, largest_bucket);
}

size_t PlanCheckpointIo(const StageModel& model, const TrainOptions& o,
                        const MemoryPlan& replicated) {
  if (o.zero == 0) return 0;
  std::unordered_map<const Parameter*, size_t> index;
  size_t n = 0;
  const std::vector<GradientBuckets::LayoutItem> items =
      GradientItems(model, o, replicated, index, &n);
  if (n == 0) return 0;
  // The replicated plan's moments (two per element) and gradients give the
  // bytes per element; the buckets are laid out over the gradients.
  const size_t moment_bytes = replicated.optimizer / (2 * n);
  const size_t gradient_bytes = replicated.gradients / n;
  const std::vector<std::vector<size_t>> layout = GradientBuckets::Layout(
      items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024));
  std::vector<int> bucket_of(items.size());
  std::vector<int64_t> bucket_elements(layout.size(), 0);
  for (size_t b = 0; b < layout.size(); ++b) {
    for (size_t i : layout[b]) {
      bucket_of[i] = static_cast<int>(b);
      bucket_elements[b] += items[i].elements;
    }
  }
  // The I/O groups (GradientSync::CheckpointGroups): each bucket under levels 1
  // and 2; under 3 the gather units' buckets (ShardedParameters::IoGroups).
  std::vector<std::vector<int>> unit_buckets;
  if (o.zero >= 3) {
    for (const std::vector<Parameter*>& unit : model.GatherUnits()) {
      unit_buckets.emplace_back();
      for (const Parameter* p : unit) {
        const int b = bucket_of[index.at(p)];
        std::vector<int>& mine = unit_buckets.back();
        if (std::find(mine.begin(), mine.end(), b) == mine.end()) {
          mine.push_back(b);
        }
      }
    }
  }
  const std::vector<std::vector<int>> groups =
      GradientBuckets::UnitBucketGroups(static_cast<int>(layout.size()),
                                        unit_buckets);
  // A group's whole moments, both kinds; the moments pass through one
  // bucket-sized gather buffer, a new one under levels 2 and 3 (level 1
  // gathers through its gradient buckets, already planned).
  size_t largest_group = 0, largest_bucket = 0;
  for (const std::vector<int>& group : groups) {
    int64_t sum = 0;
    for (int b : group) sum += bucket_elements[b];
    largest_group = std::max(largest_group, static_cast<size_t>(sum));
  }
  for (int64_t e : bucket_elements) {
    const int64_t n = o.gradient_replicas();
    const int64_t padded = (e + n - 1) / n * n;
    largest_bucket = std::max(largest_bucket, static_cast<size_t>(padded));
  }
  return 2 * moment_bytes * largest_group +
         (o.zero >= 2 ? gradient_bytes * largest_bucket : 0);
}

MemoryPlan PlanZeroMemory(const StageModel& model, const TrainOptions& o,
                          const MemoryPlan& replicated,
                          bool staged_reduce_scatter) {
  size_t largest_bucket = 0;
  const size_t in_flight =
      o.zero >= 2 ? PlanBucketsInFlight(model, o, replicated, &largest_bucket)
                  : 0;
  // Gradients are averaged, and ZeRO shards, over dp × cp ranks.
  const size_t dp = static_cast<size_t>(o.gradient_replicas());
  size_t staging = 0;
  if (staged_reduce_scatter && dp > 1) {
    staging = o.zero == 1 ? (replicated.gradients + dp - 1) / dp
                          : GradientBuckets::kMaxInFlight *
                                ((largest_bucket + dp - 1) / dp);
  }
  const size_t gathered = o.zero >= 3 ? PlanGatheredUnits(model, o) : 0;
  MemoryPlan plan = ShardOverDp(replicated, o.zero, o.gradient_replicas(),
                                in_flight, staging, gathered);
  plan.checkpoint = PlanCheckpointIo(model, o, replicated);
  return plan;
}

}  // namespace trellis
