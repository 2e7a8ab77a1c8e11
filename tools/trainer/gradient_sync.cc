#include "tools/trainer/gradient_sync.h"

#include <cstdint>

#include "framework/kernels/elementwise.h"
#include "parallel/tp_gradient_sums.h"
#include "tools/trainer/bucket_layout.h"
#include "tools/trainer/optim/sharded_optimizer.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

GradSync SyncOfLevel(int64_t zero) {
  return zero == 0   ? GradSync::kAllReduce
         : zero == 1 ? GradSync::kReduceScatter
                     : GradSync::kShardGradients;
}

ScopedTraceSpan Phase(TraceRecorder* trace, const char* name) {
  return ScopedTraceSpan(trace, name, kTraceCategoryStep,
                         StepTracer::kStepLane);
}

}  // namespace

GradientSync::GradientSync(StageModel& model, const TrainOptions& options,
                           const ProcessGroups& groups,
                           const std::vector<ParameterDeclaration>& declared,
                           ParameterFill fill)
    : model_(model),
      groups_(groups),
      tied_(FamilyOf(options.model).TiedEmbedding(options.model)) {
  const bool zero = options.zero > 0;
  // Where ZeRO's buckets break (bucket_layout.h, which the memory plan and
  // the planner read too).
  const BucketBreaks breaks = BucketBreaksOf(model_, options);
  // Under expert parallelism the experts' gradients are averaged over the
  // ranks holding the same experts, in buckets of their own.
  std::vector<Parameter*> dense, experts;
  for (Parameter* p : model_.GradientReadyOrder()) {
    (p->expert ? experts : dense).push_back(p);
  }
  const auto bucket_bytes =
      static_cast<int64_t>(options.dp_bucket_mb * 1024 * 1024);
  const GradSync sync = SyncOfLevel(options.zero);
  sets_.emplace_back();
  sets_.back().buckets =
      std::make_unique<GradientBuckets>(dense, bucket_bytes, *groups_.dp, sync,
                                        breaks.alone, breaks.starts, declared);
  if (!experts.empty()) {
    TRELLIS_CHECK(groups_.expert_dp != nullptr);
    sets_.emplace_back();
    sets_.back().expert = true;
    sets_.back().buckets = std::make_unique<GradientBuckets>(
        experts, bucket_bytes, *groups_.expert_dp, sync,
        std::vector<const Parameter*>(), breaks.starts, declared);
    sets_.back().scale = 1.0 / static_cast<double>(options.ep);
  }
  if (zero) {
    // The tp sums run on the owned blocks: the tp ranks must own the same
    // elements (the experts' gradients need no tp sum).
    CheckRangesMatchOverTp(*groups_.tp, model_.params().all(),
                           OwnedGradientRanges(buckets()));
  }
  // ZeRO-3 keeps only the owned blocks of the weights.
  if (options.zero == 3) {
    for (Set& set : sets_) {
      set.sharded =
          std::make_unique<ShardedParameters>(*set.buckets, declared, fill);
    }
  }
  InstallHooks();
}

const GradientSync::Set& GradientSync::SetOf(const Parameter* p) const {
  return p->expert ? sets_.back() : sets_.front();
}

void GradientSync::InstallHooks() {
  model_.set_on_gradient_final(
      [this](const Parameter* p) { SetOf(p).buckets->MarkReady(p); });
  if (buckets().sync() == GradSync::kShardGradients) {
    // ZeRO-2 holds a bucket only while its gradients are written.
    model_.set_gradient_writes(ModelChunk::GradientWrites{
        [this](const std::vector<Parameter*>& g) {
          for (const Set& set : sets_) {
            set.buckets->BeforeWrite(set.buckets->Held(g));
          }
        },
        [this](const std::vector<Parameter*>& g) {
          for (const Set& set : sets_) {
            set.buckets->AfterWrite(set.buckets->Held(g));
          }
        }});
  }
  if (sharded() != nullptr) {
    // ZeRO-3 gathers a unit's whole weights around each compute that reads
    // them: the dense ones over dp, the experts' over their own group.
    model_.set_weight_gathers(ModelChunk::WeightGathers{
        [this](const std::vector<Parameter*>& unit,
               const std::vector<Parameter*>& next) {
          for (const Set& set : sets_) {
            set.sharded->Acquire(set.buckets->Held(unit),
                                 set.buckets->Held(next));
          }
        },
        [this](const std::vector<Parameter*>& unit) {
          for (const Set& set : sets_) {
            set.sharded->Release(set.buckets->Held(unit));
          }
        }});
  }
}

double GradientSync::Finish(TraceRecorder* trace) {
  double dp_wait_s = 0;
  {
    const ScopedTraceSpan span = Phase(trace, "grad sync");
    for (const Set& set : sets_) dp_wait_s += FinishSet(set);
  }
  SumOverTp(trace);
  SumTiedEmbedding(trace);
  return dp_wait_s;
}

double GradientSync::FinishSet(const Set& set) {
  const double wait_s = set.buckets->Wait();
  if (set.scale == 1.0) return wait_s;
  // The experts' gradients are averaged over the dp / ep ranks holding each
  // expert; the step's gradient is the mean over all dp replicas' losses,
  // and each expert already summed the tokens of its ep group's ep
  // replicas. Under ZeRO only the owned blocks hold the averages.
  if (set.buckets->sync() == GradSync::kAllReduce) {
    for (Parameter* p : model_.params().all()) {
      if (p->expert == set.expert) Scale(p->grad, set.scale);
    }
    return wait_s;
  }
  for (int b = 0; b < set.buckets->num_buckets(); ++b) {
    Tensor block = set.buckets->Shard(b);
    Scale(block, set.scale);
  }
  return wait_s;
}

void GradientSync::SumOverTp(TraceRecorder* trace) {
  if (groups_.tp->size() == 1) return;
  // The gradient elements the data-parallel sync left: whole gradients, or
  // under ZeRO the owned block of each bucket, the same elements on every
  // tp rank (parallel/tp_gradient_sums.h). The dp average (already done)
  // and these sums commute.
  const std::vector<GradRange> ranges =
      buckets().sync() == GradSync::kAllReduce
          ? WholeGradientRanges(model_.params().all())
          : OwnedGradientRanges(buckets());
  // (The experts' gradients, in buckets of their own, have neither
  // replicated pieces nor partial sums: the ranges leave them out.)
  // Pieces replicated over sub-groups of tp (key/value heads fewer than tp
  // ranks): every replica takes the sum of their gradients, so they stay
  // identical.
  SumReplicatedGradients(*groups_.tp, ranges);
  // Under --sequence_parallel each tp rank's norm gradients cover its own
  // rows.
  const std::vector<Parameter*> partial = model_.TpPartialGradients();
  if (partial.empty()) return;
  const ScopedTraceSpan span = Phase(trace, "tp sync");
  SumPartialGradients(*groups_.tp, partial, ranges);
}

void GradientSync::SumTiedEmbedding(TraceRecorder* trace) {
  if (groups_.embed == nullptr || groups_.embed->size() <= 1 || tied_.empty()) {
    return;
  }
  const ScopedTraceSpan span = Phase(trace, "embed sync");
  const Parameter* embedding = model_.params().Find(tied_);
  // ZeRO-2 keeps only this rank's block of it (its bucket's, alone).
  const GradientBuckets& dense = buckets();
  Tensor grad = dense.sync() == GradSync::kShardGradients
                    ? dense.Shard(dense.BucketOf(embedding))
                    : embedding->grad;
  groups_.embed->AllReduce(grad, ReduceOp::kSum);
}

std::unique_ptr<Optimizer> GradientSync::NewOptimizer(
    const OptimizerConfig& config) const {
  if (buckets().sync() == GradSync::kAllReduce) {
    auto optimizer = std::make_unique<Optimizer>(config, model_.params());
    if (sets_.back().expert) optimizer->set_expert_group(groups_.ep);
    return optimizer;
  }
  std::vector<ShardedSet> sets;
  for (const Set& set : sets_) {
    sets.push_back(ShardedSet{set.buckets.get(), set.sharded.get()});
  }
  return std::make_unique<ShardedOptimizer>(config, model_.params(),
                                            std::move(sets));
}

std::vector<std::vector<Parameter*>> GradientSync::CheckpointGroups() const {
  // Each group lies in one set of buckets: the dense set's groups, then
  // the experts'.
  std::vector<std::vector<Parameter*>> groups;
  if (sharded() != nullptr) {
    const std::vector<std::vector<Parameter*>> units = model_.GatherUnits();
    for (const Set& set : sets_) {
      std::vector<std::vector<Parameter*>> held;
      for (const std::vector<Parameter*>& unit : units) {
        held.push_back(set.buckets->Held(unit));
      }
      for (auto& group : set.sharded->IoGroups(held)) {
        groups.push_back(std::move(group));
      }
    }
    return groups;
  }
  // ZeRO-1/2: each gradient bucket's parameters (whole weights already).
  for (const Set& set : sets_) {
    for (int b = 0; b < set.buckets->num_buckets(); ++b) {
      groups.push_back(set.buckets->BucketParameters(b));
    }
  }
  return groups;
}

// (A group lies in one set; an empty one goes to the dense set, as every
// rank of the set must take part.)
void GradientSync::GatherGroup(const std::vector<Parameter*>& group,
                               bool gather) {
  if (sharded() == nullptr) return;
  const Set& set = group.empty() ? sets_.front() : SetOf(group.front());
  set.sharded->GatherUnit(group, gather);
}

void GradientSync::ShardGroup(const std::vector<Parameter*>& group, bool keep) {
  if (sharded() == nullptr) return;
  const Set& set = group.empty() ? sets_.front() : SetOf(group.front());
  set.sharded->ShardUnit(group, keep);
}

}  // namespace trellis
