#include "tools/trainer/bucket_layout.h"

#include <algorithm>
#include <string>

#include "transformer/model_family.h"

namespace trellis {

std::vector<BucketSet> BucketSets(const StageModel& model,
                                  const TrainOptions& o) {
  std::vector<BucketSet> sets = {{false, o.gradient_replicas()}};
  for (const Parameter* p : model.params().all()) {
    if (!p->expert) continue;
    sets.push_back({true, o.gradient_replicas() / o.ep});
    break;
  }
  return sets;
}

std::vector<int> SetBuckets::UnitBuckets(
    const std::vector<Parameter*>& unit) const {
  std::vector<int> out;
  for (const Parameter* p : unit) {
    auto it = index.find(p);
    if (it == index.end()) continue;
    const int b = of_item[it->second];
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  return out;
}

BucketBreaks BucketBreaksOf(const StageModel& model, const TrainOptions& o) {
  BucketBreaks out;
  const std::string tied = FamilyOf(o.model).TiedEmbedding(o.model);
  // (Middle pipeline stages hold no embedding.)
  const Parameter* embedding =
      tied.empty() ? nullptr : model.params().Find(tied);
  if (o.zero > 0 && embedding != nullptr) out.alone.push_back(embedding);
  if (o.zero == 3) out.starts = model.WeightGroupStarts();
  return out;
}

SetBuckets LayOutBuckets(const StageModel& model, const TrainOptions& o,
                         const BucketSet& set, size_t element_bytes) {
  SetBuckets out;
  for (const Parameter* p : model.GradientReadyOrder()) {
    if (p->expert != set.expert) continue;
    out.index[p] = out.items.size();
    out.params.push_back(p);
    out.items.push_back(
        {NumElements(p->spec.LocalShape()), element_bytes, 0, false, false});
  }
  const BucketBreaks breaks = BucketBreaksOf(model, o);
  auto mark = [&out](const std::vector<const Parameter*>& list,
                     bool GradientBuckets::LayoutItem::*field) {
    for (const Parameter* p : list) {
      auto it = out.index.find(p);
      if (it != out.index.end()) out.items[it->second].*field = true;
    }
  };
  mark(breaks.alone, &GradientBuckets::LayoutItem::alone);
  mark(breaks.starts, &GradientBuckets::LayoutItem::starts);
  out.of_item.resize(out.items.size());
  out.offset_of_item.resize(out.items.size());
  for (const std::vector<size_t>& bucket : GradientBuckets::Layout(
           out.items, static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024))) {
    int64_t n = 0;
    for (size_t i : bucket) {
      out.of_item[i] = static_cast<int>(out.elements.size());
      out.offset_of_item[i] = n;
      n += out.items[i].elements;
    }
    out.elements.push_back(n);
    out.padded.push_back(
        o.zero > 0 ? (n + set.ranks - 1) / set.ranks * set.ranks : n);
  }
  return out;
}

}  // namespace trellis
