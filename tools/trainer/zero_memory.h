// PlanZeroMemory: a rank's memory plan under its ZeRO level (--zero), from
// the stage's declared parameters (no tensor need exist).
//
// Level 0 is the replicated plan. Level 1 keeps 1/dp of the AdamW moments;
// level 2 also 1/dp of the gradients plus the bucket buffers in flight,
// planned with GradientBuckets::PlanBoundBytes over the stage's weight
// groups (the tied embedding alone in its bucket; the last stage's head
// weight, taken to be its largest parameter, written ahead in forward).
// With `staged_reduce_scatter` (MPI: an in-place reduce-scatter goes
// through a scratch block of 1/dp of the bucket) levels 1 and 2 add those
// blocks: every bucket's at once under level 1, kMaxInFlight of the
// largest under level 2. Level 3 keeps 1/dp of the weights plus two
// gather units' whole values (PlanGatheredUnits), and its gradients as
// level 2 over buckets that start at each weight group. See ShardOverDp.
// At every level ≥ 1 checkpoint I/O makes one group's moments whole between
// steps (PlanCheckpointIo), which the plan holds in place of activations.
// Under expert parallelism the experts' gradients lie in buckets of their
// own sharded over the dp·cp / ep ranks holding the same experts: each set
// of buckets shards its share (by elements) of the weights, gradients and
// moments over its own ranks, with its own buckets in flight and scratch.
// Thread safety: a pure function of its arguments.
#ifndef TRELLIS_TOOLS_TRAINER_ZERO_MEMORY_H_
#define TRELLIS_TOOLS_TRAINER_ZERO_MEMORY_H_

#include <cstddef>

#include "tools/options/options.h"
#include "tools/trainer/memory_plan.h"
#include "tools/trainer/stage_model.h"

namespace trellis {

// `replicated`: model.PlanMemory's plan (level 0).
MemoryPlan PlanZeroMemory(const StageModel& model, const TrainOptions& o,
                          const MemoryPlan& replicated,
                          bool staged_reduce_scatter);

// Checkpoint I/O's whole bytes at once under levels 1 to 3 (0 at level 0,
// whose moments are whole anyway): the largest I/O group's moments, both
// kinds, in the moments' dtype (the groups as GradientSync::CheckpointGroups
// walks them: each gradient bucket, or under level 3 the buckets of each
// gather unit), plus under levels 2 and 3 one bucket-sized gather buffer.
// Level 3's weights gathered for I/O use the planned gather units.
size_t PlanCheckpointIo(const StageModel& model, const TrainOptions& o,
                        const MemoryPlan& replicated);

// Level 3's gathered weights held at once: the two largest gather units
// (ModelChunk::GatherUnits; one computed, the next gathered), each counted
// as the whole buckets (padded, in the values' dtype) its parameters lie
// in.
size_t PlanGatheredUnits(const StageModel& model, const TrainOptions& o);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_ZERO_MEMORY_H_
