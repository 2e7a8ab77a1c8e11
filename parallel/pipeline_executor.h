// PipelineExecutor: runs one stage's schedule (see schedule.h) for one step.
//
// The executor knows nothing of the model. It walks the action list, asks the
// stage (PipelineStageCallbacks, implemented by the trainer) for buffers and
// to compute, and moves activations and gradients over the pipeline group's
// Communicator with non-blocking transfers:
//   - RecvAct / RecvGrad post a receive into the stage's buffer; the compute
//     that needs it waits for it first (the wait is idle time);
//   - SendAct / SendGrad post a send of the buffer the compute just filled;
//     sends are waited on at the end of the step, or earlier when a later
//     compute or receive writes memory that overlaps a buffer still being
//     sent (see the buffer contract below);
//   - each run of consecutive transfer actions (those between two computes,
//     TransferBatches) is posted as one batch (Communicator::BatchSendRecv),
//     so on NCCL, where a send waits for its receive and transfers run in
//     order on one stream, a stage that sends to a neighbour while
//     receiving from it cannot wait on itself. ValidateSchedules checks
//     every schedule in that model.
// Activations go to stage (s + 1) mod P with tag kActivationTag, gradients
// to (s − 1) mod P with kGradientTag; messages on each are matched in order
// (and on a transport without tags, all messages between two stages are).
//
// It measures, per step, compute time (busy) and time blocked on transfers
// (idle), and can report each action's start and end to an observer (for
// traces). On a GPU the host only queues the work, so host times say little:
// with a device clock (set_device_clock) each action is also marked on the
// device's stream, and PipelineStepStats::ResolveDeviceTime turns the marks
// into the time the device computed (busy) and sat between computes (idle).
//
// Buffer contract: buffers of distinct (virtual stage, microbatch) pairs may
// share memory (PipelineBufferSlots assigns the trainer's), as long as a
// receive buffer is not received into again before the compute that reads
// it has run (the executor checks that). The executor never lets memory be
// overwritten while a send still reads it: before a compute that writes a
// buffer it then sends, and before a receive, it waits for every pending
// send from overlapping memory. On a GPU those waits order the compute
// stream after the send (Request::Wait); a receive is posted after the
// compute that last read its buffer was queued, and communicators order
// their transfers after the work queued before them.
//
// Thread safety: Run drives the pipeline communicator; one thread.
#ifndef TRELLIS_PARALLEL_PIPELINE_EXECUTOR_H_
#define TRELLIS_PARALLEL_PIPELINE_EXECUTOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/tensor.h"
#include "framework/trace.h"
#include "parallel/communicator.h"
#include "parallel/schedule.h"

namespace trellis {

// What the trainer implements for one pipeline stage. `vstage` is the
// virtual stage on this stage (0 unless interleaved), `mb` the microbatch.
class PipelineStageCallbacks {
 public:
  virtual ~PipelineStageCallbacks() = default;

  // The buffer the input activation of F(vstage, mb) is received into
  // (chunks after the first).
  virtual Tensor InputActivation(int vstage, int mb) = 0;
  // The output activation F(vstage, mb) produced, to send (chunks before the
  // last). Called after Forward(vstage, mb), and before it to learn which
  // memory it writes: the same buffer both times.
  virtual Tensor OutputActivation(int vstage, int mb) = 0;
  // The buffer the gradient of F(vstage, mb)'s output is received into
  // (chunks before the last).
  virtual Tensor OutputGradient(int vstage, int mb) = 0;
  // The gradient of F(vstage, mb)'s input that BackwardInput produced, to
  // send (chunks after the first). Called after BackwardInput(vstage, mb),
  // and before it to learn which memory it writes: the same buffer.
  virtual Tensor InputGradient(int vstage, int mb) = 0;

  virtual void Forward(int vstage, int mb) = 0;
  virtual void BackwardInput(int vstage, int mb) = 0;
  virtual void BackwardWeight(int vstage, int mb) = 0;
};

// Timing of one step on this stage, in seconds.
struct PipelineStepStats {
  double busy_seconds = 0.0;   // inside Forward/BackwardInput/BackwardWeight
  double idle_seconds = 0.0;   // waiting for receives and, at the end, sends
  double total_seconds = 0.0;  // the whole Run
  int64_t actions = 0;
  // With a device clock: the marks of the step's start and end and of each
  // compute's begin and end, not yet read.
  int64_t device_start = -1, device_end = -1;
  std::vector<std::pair<int64_t, int64_t>> device_computes;
  // idle / (busy + idle); 0 when nothing ran.
  double BubbleFraction() const;
  // Replaces the host times by the device's: busy is the device time of the
  // computes, total the device time from the step's first action to its
  // last, idle the rest. Waits until the device has run the step. No-op
  // without device marks.
  void ResolveDeviceTime(TraceClock& clock);
};

// When an action ran: host time points, and with a device clock the marks
// around the device's part of it (-1 without).
struct ActionTiming {
  std::chrono::steady_clock::time_point start, end;
  int64_t begin_mark = -1, end_mark = -1;
};

class PipelineExecutor {
 public:
  static constexpr int kActivationTag = 1001;
  static constexpr int kGradientTag = 1002;

  using Clock = std::chrono::steady_clock;
  // Called after each action with its start and end, in list order. A
  // compute's span excludes the wait for its input (a trace shows that as a
  // gap); a transfer's span is the posting of its batch (shared by the
  // batch's actions).
  using Observer = std::function<void(const Action&, const ActionTiming&)>;

  // `pipeline` is the pp group (its rank is this stage, its size the number
  // of stages); it may be a group of one, whose schedule has no transfers.
  // REQUIRES: `pipeline` outlives the executor; `actions` is this stage's
  // schedule for `virtual_stages` virtual stages.
  PipelineExecutor(Communicator& pipeline, std::vector<Action> actions,
                   int virtual_stages = 1);

  void set_observer(Observer observer) { observer_ = std::move(observer); }
  // Marks every action on `clock` too (NewDeviceTraceClock); null: host
  // times only.
  void set_device_clock(std::shared_ptr<TraceClock> clock) {
    device_clock_ = std::move(clock);
  }
  const std::vector<Action>& actions() const { return actions_; }

  // Runs the whole list once, then waits for every send. REQUIRES: the
  // other stages run their matching schedules on the same group.
  PipelineStepStats Run(PipelineStageCallbacks& stage);

 private:
  Communicator& pipeline_;
  std::vector<Action> actions_;
  int virtual_stages_;
  // (compute type, virtual stage, microbatch) of the computes whose output
  // the list sends.
  std::set<std::tuple<ActionType, int, int>> sent_outputs_;
  Observer observer_;
  std::shared_ptr<TraceClock> device_clock_;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_PIPELINE_EXECUTOR_H_
