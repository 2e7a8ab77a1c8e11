// Pipeline buffer slots: how few activation and gradient buffers between
// stages a schedule needs, and which microbatch uses which.
//
// A stage moves four kinds of buffer per (virtual stage, microbatch), named
// as the executor's callbacks name them (PipelineStageCallbacks):
//   - input activation: received by RecvAct, read by F;
//   - output gradient:  received by RecvGrad, read by B;
//   - output activation: written by F, sent by SendAct;
//   - input gradient:   written by B, sent by SendGrad.
// Keeping one buffer per microbatch grows a stage's memory with the number
// of microbatches; but a buffer is live only for part of the step, so
// microbatches whose lives do not overlap can share one buffer, a slot.
//
// Lives, as closed intervals of positions in the stage's action list:
//   - a received buffer from its receive to the compute that reads it (the
//     consumer copies what later computes need: a chunk keeps its input in
//     its microbatch state, a deferred W its own copy of the gradient);
//   - a sent buffer from the compute that writes it to its send. The send
//     itself is asynchronous and may still read the buffer later; the
//     executor waits for a pending send on a buffer before a compute writes
//     into it again, so a slot is never overwritten while it is being sent
//     (in the rendezvous model the validator checks, a batch completes
//     before the next action anyway).
// Slots are handed out in list order, each interval taking the lowest slot
// whose previous interval has ended: the greedy colouring of an interval
// graph, which needs exactly as many slots as intervals overlap at most.
// So a 1F1B stage needs a handful of slots however many microbatches the
// step has. The trainer's buffers and its memory plan both take their
// counts from here.
//
// Thread safety: immutable after Assign; pure functions.
#ifndef TRELLIS_PARALLEL_PIPELINE_BUFFERS_H_
#define TRELLIS_PARALLEL_PIPELINE_BUFFERS_H_

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/schedule.h"

namespace trellis {

enum class PipelineBuffer {
  kInputActivation,
  kOutputActivation,
  kOutputGradient,
  kInputGradient,
};
inline constexpr int kNumPipelineBuffers = 4;
// "input activation", "output activation", ...
const char* PipelineBufferName(PipelineBuffer kind);
// The buffer a transfer action moves. REQUIRES: IsSend(t) || IsRecv(t).
PipelineBuffer BufferOfTransfer(ActionType t);

// One buffer's life on a stage: positions in the action list, both ends
// included.
struct BufferLife {
  PipelineBuffer kind = PipelineBuffer::kInputActivation;
  int virtual_stage = 0;
  int microbatch = 0;
  int begin = 0;  // the receive, or the compute that writes the buffer
  int end = 0;    // the compute that reads it, or the send
};

// Every buffer life of `actions` (one stage's list), in no particular
// order. REQUIRES: each transfer's compute is in the list (a schedule that
// passes ValidateSchedules).
std::vector<BufferLife> BufferLives(const std::vector<Action>& actions);

class PipelineBufferSlots {
 public:
  // No buffers at all (a schedule without transfers).
  PipelineBufferSlots() = default;
  // The slots of `actions`, one stage's list for `virtual_stages` virtual
  // stages. REQUIRES: as BufferLives.
  static PipelineBufferSlots Assign(const std::vector<Action>& actions,
                                    int virtual_stages);

  int virtual_stages() const { return virtual_stages_; }
  // Slots of `kind` on virtual stage `vstage` (0 where none is moved).
  int count(PipelineBuffer kind, int vstage) const;
  // The slot of (kind, vstage, mb). REQUIRES: the list moves that buffer.
  int slot(PipelineBuffer kind, int vstage, int mb) const;
  // Every count at least `other`'s (for buffers two schedules share);
  // slot() still answers for this assignment's list. REQUIRES: the same
  // number of virtual stages, or either assignment empty.
  void Widen(const PipelineBufferSlots& other);
  // "input activation: 2 | 2; output activation: 1 | 1; ..." (per virtual
  // stage).
  std::string CountsString() const;

 private:
  int virtual_stages_ = 0;
  std::vector<int> counts_;  // [kind · virtual_stages + vstage]
  std::map<std::tuple<int, int, int>, int> slots_;  // (kind, vstage, mb)
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_PIPELINE_BUFFERS_H_
