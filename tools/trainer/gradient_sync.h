// GradientSync: everything that happens to a stage's gradients between the
// backward and the optimizer, owned in one place.
//
// It builds the data-parallel gradient buckets over the stage's parameters
// (their kind from --zero: all-reduce at 0, reduce-scatter at 1, sharded
// gradients at 2 and 3) and, under expert parallelism, the experts' own
// buckets over the ranks holding the same experts (averaged there, then
// scaled by 1/ep: each expert's gradient already sums the tokens of ep
// replicas; under ZeRO reduce-scattered there, each rank owning a block of
// them), ZeRO-3's sharded weights, and installs the hooks
// the model's chunks call during the step: a gradient is final (its bucket
// may start), ZeRO-2's gradient write windows, ZeRO-3's weight gathers.
// After the pipeline, Finish() completes the step's gradients: it waits for
// the buckets, sums over tp what the model leaves partial or replicated
// (on the elements the dp sync left: whole gradients, or under ZeRO each
// rank's owned blocks), and sums the tied embedding's gradient between the
// first and last stage. The optimizer that matches its ownership (a
// ShardedOptimizer under ZeRO) comes from NewOptimizer.
//
// Thread safety: one per rank, used from the training thread; the hooks
// run on it too.
#ifndef TRELLIS_TOOLS_TRAINER_GRADIENT_SYNC_H_
#define TRELLIS_TOOLS_TRAINER_GRADIENT_SYNC_H_

#include <memory>
#include <string>
#include <vector>

#include "framework/trace.h"
#include "parallel/data_parallel.h"
#include "parallel/device_groups.h"
#include "parallel/sharded_parameters.h"
#include "tools/options/options.h"
#include "tools/trainer/health/step_tracer.h"
#include "tools/trainer/optim/optimizer.h"
#include "tools/trainer/stage_model.h"

namespace trellis {

class GradientSync {
 public:
  // `declared`: under --zero=3 the model's parameter declarations, taken
  // before it allocated (ZeRO-3 fills only the owned blocks from them,
  // with `fill`); empty otherwise. `model` and `groups` outlive this.
  GradientSync(StageModel& model, const TrainOptions& options,
               const ProcessGroups& groups,
               const std::vector<ParameterDeclaration>& declared,
               ParameterFill fill);
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before the step's first backward.
  void StartStep() {
    for (const Set& set : sets_) set.buckets->StartStep();
  }
  // After the pipeline: the step's gradients final and summed on every
  // rank. Returns the seconds spent waiting for the dp buckets. `trace`
  // (null when the step is not traced) gets a span per phase.
  double Finish(TraceRecorder* trace);

  // The optimizer over the elements this rank owns.
  std::unique_ptr<Optimizer> NewOptimizer(const OptimizerConfig& config) const;
  // The parameter groups checkpoint I/O walks one at a time: ZeRO-3's
  // gather units' buckets, else each bucket's parameters.
  std::vector<std::vector<Parameter*>> CheckpointGroups() const;

  // The dense parameters' buckets.
  const GradientBuckets& buckets() const { return *sets_.front().buckets; }
  // --zero=3's sharded weights (the dense ones), or null.
  ShardedParameters* sharded() const { return sets_.front().sharded.get(); }
  // Under --zero=3, makes a group of CheckpointGroups whole (all-gathered
  // when `gather`, else zeros to load into) and shards it again (keeping
  // what was loaded with `keep`); no-ops at other levels.
  void GatherGroup(const std::vector<Parameter*>& group, bool gather);
  void ShardGroup(const std::vector<Parameter*>& group, bool keep);

 private:
  void InstallHooks();
  // Sums over tp the gradients the model leaves partial (sequence
  // parallel's norms) and those of pieces replicated over sub-groups of tp.
  void SumOverTp(TraceRecorder* trace);
  // The tied embedding's gradient, summed between the first and last stage.
  void SumTiedEmbedding(TraceRecorder* trace);

  // One set of buckets: the dense parameters' over dp; under expert
  // parallelism also the experts' over the expert-data group, with the
  // scale that turns their average there into the dp mean's share (1 / ep).
  // Under ZeRO-3 each set's weights are sharded over the set's own group.
  struct Set {
    bool expert = false;
    std::unique_ptr<GradientBuckets> buckets;
    std::unique_ptr<ShardedParameters> sharded;  // ZeRO-3 only
    double scale = 1.0;
  };
  // The set holding `p` (its `expert` mark picks it).
  const Set& SetOf(const Parameter* p) const;
  // Waits for `set`'s buckets and applies its scale to what they hold:
  // whole gradients, or under ZeRO the owned blocks. Seconds waited.
  double FinishSet(const Set& set);

  StageModel& model_;
  ProcessGroups groups_;
  // The tied embedding's name; empty for a family without one.
  std::string tied_;
  std::vector<Set> sets_;  // the dense set first
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_GRADIENT_SYNC_H_
