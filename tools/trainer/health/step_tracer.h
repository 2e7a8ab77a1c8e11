// StepTracer: the trainer's tracing of chosen steps (--trace_dir,
// --trace_steps), written per rank as <trace_dir>/trace_rank<RRRRR>.json.
//
// It wraps the run's tensor-, data- and pipeline-parallel and embedding
// communicators in TracingCommunicators (their collectives and waits become
// spans), observes the pipeline executor (F, B and W with stage, virtual
// stage and microbatch; the posts of sends and receives), names each
// receive wait after the action it feeds ("wait RecvAct3"), and gives the
// trainer a recorder for the phases of a step (data, pipeline, grad sync,
// embed sync, optimizer). tools/bubbles/trace_file.h lists the conventions
// trellis-bubbles reads.
//
// A traced step begins with a barrier over the world, so every rank's spans
// share one origin (set at the first traced step) and start together.
// Untraced steps record nothing; without --trace_dir the trainer makes no
// StepTracer at all.
//
// Thread safety: the training thread only. All ranks must trace the same
// steps (the barrier is collective); CheckConfigsAgree ensures it.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_STEP_TRACER_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_STEP_TRACER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "framework/trace.h"
#include "parallel/bootstrap.h"
#include "parallel/pipeline_executor.h"
#include "parallel/tracing_communicator.h"
#include "tools/options/options.h"

namespace trellis {

class StepTracer {
 public:
  // Lanes (Chrome trace tids), in display order.
  enum Lane {
    kStepLane = 1,
    kComputeLane,
    kPipelineLane,
    kDataParallelLane,
    kTensorParallelLane,
    kEmbedLane,
    kContextLane  // the cp group's ring or all-to-all transfers
  };

  // REQUIRES: options resolved, with a trace_dir; `groups` outlive this.
  // `device_clock` (NewDeviceTraceClock; null on CPU) times F, B, W and the
  // transfer posts on the device; it must be the executor's.
  StepTracer(const TrainOptions& options, const ProcessGroups& groups,
             MeshCoord coord, std::shared_ptr<TraceClock> device_clock);

  // The run's groups with tp, dp, pp, embed and cp traced: hand these to the
  // model, executor, buckets and optimizer.
  const ProcessGroups& groups() const { return traced_; }

  // Records `executor`'s actions and names its receive waits.
  // REQUIRES: the executor runs over groups().pp and outlives its steps.
  void Observe(PipelineExecutor& executor);

  // If `step` (1-based, as logged) is traced: a world barrier, then
  // recording starts; returns the recorder. Otherwise returns null.
  TraceRecorder* BeginStep(int64_t step);
  // Ends a traced step begun at `start`: records its "step" span, stops
  // recording and rewrites this rank's file.
  absl::Status EndStep(std::chrono::steady_clock::time_point start);

  const TraceRecorder& recorder() const { return recorder_; }

 private:
  void OnAction(const Action& a, const ActionTiming& t);

  ProcessGroups raw_;
  ProcessGroups traced_;
  MeshCoord coord_;
  int num_stages_;
  std::string path_;
  std::set<int64_t> steps_;
  bool device_timed_;  // before recorder_, which takes the clock
  bool origin_set_ = false;
  int64_t step_ = 0;
  TraceRecorder recorder_;
  std::vector<std::unique_ptr<TracingCommunicator>> wrappers_;
  TracingCommunicator* pp_ = nullptr;
  // The receives of the schedule per tag, in order: what each wait feeds.
  std::vector<Action> recv_activation_, recv_grad_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_STEP_TRACER_H_
