// StageSchedules: every pipeline stage's training schedule and the buffer
// slots StageModel keeps for it, built once per schedule shape.
//
// A StageModel builds its own stage's list and slots when it is given none
// (the trainer: one stage per process). The planner plans every stage of
// many layouts; there each stage building every stage's lists (which
// BuildSchedule does) made planning quadratic in pp and dominated the time
// at hundreds of ranks, so it builds them once per (schedule, pp,
// microbatches, virtual stages) and hands each stage its entry.
//
// The slots planned for a stage are its training list's, widened to what a
// forward-only pass of a step's microbatches needs (evaluation reuses the
// same buffers): PlannedBufferSlots states that rule once.
//
// Thread safety: a value type; const use from several threads is safe.
#ifndef TRELLIS_TOOLS_TRAINER_STAGE_SCHEDULES_H_
#define TRELLIS_TOOLS_TRAINER_STAGE_SCHEDULES_H_

#include <memory>
#include <vector>

#include "parallel/pipeline_buffers.h"
#include "parallel/schedule.h"
#include "tools/options/options.h"

namespace trellis {

// Slots are shared, not copied, by the StageModels that take them.
struct StageSchedules {
  using Slots = std::shared_ptr<const PipelineBufferSlots>;
  std::vector<std::vector<Action>> actions;  // [stage]
  std::vector<Slots> train_slots;            // [stage]
  std::vector<Slots> planned_slots;          // [stage]
};

// The slots a stage plans: those of its training list `schedule`, widened
// to those of its forward-only list `forward_only` for the step's
// microbatches.
PipelineBufferSlots PlannedBufferSlots(const std::vector<Action>& schedule,
                                       const std::vector<Action>& forward_only,
                                       int virtual_stages);

// Every stage's schedule and slots for `options`' schedule, pp,
// microbatches and virtual stages. REQUIRES: `options` resolved
// (TrainOptions::Resolve).
StageSchedules BuildStageSchedules(const TrainOptions& options);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_STAGE_SCHEDULES_H_
