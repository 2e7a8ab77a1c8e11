#include "tools/trainer/stage_schedules.h"

namespace trellis {

PipelineBufferSlots PlannedBufferSlots(const std::vector<Action>& schedule,
                                       const std::vector<Action>& forward_only,
                                       int virtual_stages) {
  PipelineBufferSlots slots =
      PipelineBufferSlots::Assign(schedule, virtual_stages);
  // ForwardOnly runs at most a step's microbatches at a time; shorter runs
  // need no more slots (tests/parallel/pipeline_buffers_test.cc).
  slots.Widen(PipelineBufferSlots::Assign(forward_only, virtual_stages));
  return slots;
}

StageSchedules BuildStageSchedules(const TrainOptions& options) {
  const int pp = static_cast<int>(options.pp);
  const int m = static_cast<int>(options.microbatches());
  const int v = static_cast<int>(options.virtual_stages);
  StageSchedules s;
  s.actions = BuildAllSchedules(options.schedule, pp, m, v);
  const std::vector<std::vector<Action>> forward_only =
      BuildForwardOnlySchedules(pp, m, v);
  for (int p = 0; p < pp; ++p) {
    s.train_slots.push_back(std::make_shared<const PipelineBufferSlots>(
        PipelineBufferSlots::Assign(s.actions[p], v)));
    s.planned_slots.push_back(std::make_shared<const PipelineBufferSlots>(
        PlannedBufferSlots(s.actions[p], forward_only[p], v)));
  }
  return s;
}

}  // namespace trellis
