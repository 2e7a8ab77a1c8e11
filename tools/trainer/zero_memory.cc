#include "tools/trainer/zero_memory.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/data_parallel.h"
#include "transformer/model_family.h"

namespace trellis {

size_t PlanBucketsInFlight(const StageModel& model, const TrainOptions& o,
                           const MemoryPlan& replicated,
                           size_t* largest_bucket) {
  // From the declared shapes: the parameters need not exist yet.
  std::unordered_map<const Parameter*, size_t> index;
  std::vector<GradientBuckets::LayoutItem> items;
  int64_t elements = 0;
  for (const Parameter* p : model.GradientReadyOrder()) {
    index[p] = items.size();
    items.push_back({NumElements(p->spec.LocalShape()), 0, 0, false});
    elements += items.back().elements;
  }
  if (elements == 0) return 0;
  for (auto& item : items) {
    item.element_bytes = replicated.gradients / static_cast<size_t>(elements);
  }
  std::vector<std::vector<size_t>> groups;
  for (const std::vector<Parameter*>& group : model.WeightGroups()) {
    groups.emplace_back();
    for (const Parameter* p : group) groups.back().push_back(index.at(p));
  }
  // The tied embedding has a bucket of its own (as the trainer builds
  // them). The last stage's head weight is written in forward, ahead of
  // its group: it is taken to be the stage's largest parameter (V/tp rows
  // of the model width).
  const std::string tied = FamilyOf(o.model).TiedEmbedding(o.model);
  // (Middle pipeline stages hold no embedding.)
  const Parameter* embedding =
      tied.empty() ? nullptr : model.params().Find(tied);
  if (embedding != nullptr) items[index.at(embedding)].alone = true;
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
      static_cast<int>(o.dp), groups, early, largest_bucket);
}

MemoryPlan PlanZeroMemory(const StageModel& model, const TrainOptions& o,
                          const MemoryPlan& replicated,
                          bool staged_reduce_scatter) {
  size_t largest_bucket = 0;
  const size_t in_flight =
      o.zero >= 2 ? PlanBucketsInFlight(model, o, replicated, &largest_bucket)
                  : 0;
  const size_t dp = static_cast<size_t>(o.dp);
  size_t staging = 0;
  if (staged_reduce_scatter && dp > 1) {
    staging = o.zero == 1 ? (replicated.gradients + dp - 1) / dp
                          : GradientBuckets::kMaxInFlight *
                                ((largest_bucket + dp - 1) / dp);
  }
  return ShardOverDp(replicated, o.zero, o.dp, in_flight, staging);
}

}  // namespace trellis
