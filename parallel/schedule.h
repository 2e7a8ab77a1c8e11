// Pipeline schedules as data.
//
// A schedule is, for one pipeline stage, the ordered list of actions it runs
// in one optimizer step: forward (F), backward for the input gradient (B),
// backward for the weight gradient (W), and the transfers between stages.
// It is a pure function of (kind, stage, stages, microbatches, virtual
// stages), so it is built, validated and simulated here without any
// communicator; the PipelineExecutor walks it.
//
// Model chunks. With v virtual stages per stage (interleaved schedules) the
// model is cut into P·v chunks; stage s holds chunks s, s + P, ..., so its
// virtual stage u is global chunk u·P + s. With v == 1 a stage is one chunk.
// Chunk 0 is the first (it embeds tokens); chunk P·v − 1 the last (the loss).
//
// Transfers. Activations always flow to stage (s + 1) mod P and gradients to
// (s − 1) mod P; the two directions are separate channels (separate tags).
// On each channel messages are matched in order, so a stage's receives must
// come in the order its neighbour's sends do. A send or receive action names
// the (virtual stage, microbatch) of the compute on *this* stage it belongs
// to: kSendActivation(u, mb) sends the output of F(u, mb); kRecvActivation
// (u, mb) receives the input of F(u, mb); kSendGrad(u, mb) sends the input
// gradient from B(u, mb); kRecvGrad(u, mb) receives the output gradient that
// B(u, mb) needs.
//
// Batches. The executor posts each maximal run of consecutive transfer
// actions (the transfers that meet at one point of the schedule, between
// two computes) as one batch (Communicator::BatchSendRecv): on NCCL one
// ncclGroupStart/ncclGroupEnd. BuildSchedule places the transfers so that
// every send and its receive sit in batches of the same lockstep round on
// both stages (PlaceTransfers): a send right after its compute, a receive
// as soon as its data is sent, possibly several computes before the one
// that needs it. So 1F1B's steady state posts SendAct(i) with RecvGrad(j)
// and SendGrad(j) with RecvAct(k) together, as Megatron's batched
// send_forward_recv_backward and send_backward_recv_forward do.
//
// The validator checks the schedules under two transfer models, and a
// schedule must pass both:
//   - eager (MPI's non-blocking transfers): a send never blocks; a receive
//     is posted once its send has been issued, and the compute that needs
//     it waits for the data (SimulateSchedules);
//   - rendezvous (NCCL; CheckRendezvous): each stage's batches run in order,
//     as on one stream; a batch completes only when every send in it has
//     its receive posted in a batch that has started on the peer, and every
//     receive its send; the transfers between two stages are matched in the
//     order posted whatever their channel (NCCL has no tags).
//
// Thread safety: everything here is a pure function.
#ifndef TRELLIS_PARALLEL_SCHEDULE_H_
#define TRELLIS_PARALLEL_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {

enum class ScheduleKind {
  kGPipe,            // all F, then all B (each followed by its W)
  k1F1B,             // PipeDream-flush: warm-up, steady one-F-one-B, drain
  kInterleaved1F1B,  // 1F1B over v virtual stages (Megatron-LM)
  kZeroBubbleH1,     // 1F1B with W deferred into the drain (ZB-H1)
};

// "gpipe", "1f1b", "interleaved-1f1b", "zb-h1".
const char* ScheduleKindName(ScheduleKind kind);
absl::StatusOr<ScheduleKind> ParseScheduleKind(const std::string& name);

// Checks what a user can get wrong (flags): sizes at least 1, virtual stages
// only for interleaved schedules and more than one stage, and for
// interleaved schedules microbatches a multiple of the stages.
absl::Status CheckScheduleShape(ScheduleKind kind, int num_stages,
                                int num_microbatches, int virtual_stages);

enum class ActionType {
  kForward,
  kBackwardInput,
  kBackwardWeight,
  kSendActivation,
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
};
// "F", "B", "W", "SendAct", "RecvAct", "SendGrad", "RecvGrad".
const char* ActionTypeName(ActionType type);
inline bool IsCompute(ActionType t) {
  return t == ActionType::kForward || t == ActionType::kBackwardInput ||
         t == ActionType::kBackwardWeight;
}
inline bool IsSend(ActionType t) {
  return t == ActionType::kSendActivation || t == ActionType::kSendGrad;
}
inline bool IsRecv(ActionType t) {
  return t == ActionType::kRecvActivation || t == ActionType::kRecvGrad;
}

struct Action {
  ActionType type = ActionType::kForward;
  int microbatch = 0;
  int virtual_stage = 0;  // 0 unless interleaved
  bool operator==(const Action&) const = default;
  // "F3", "RecvGrad3", and with a virtual stage "F3@1".
  std::string ToString() const;
};
std::string ActionsString(const std::vector<Action>& actions);

// Neighbours of `stage` on the activation and gradient channels.
inline int NextStage(int stage, int num_stages) {
  return (stage + 1) % num_stages;
}
inline int PrevStage(int stage, int num_stages) {
  return (stage + num_stages - 1) % num_stages;
}

// The actions of `stage` for one step: the computes in the order `kind`
// runs them, with the transfers placed by PlaceTransfers.
// REQUIRES: CheckScheduleShape(kind, ...) is OK and 0 <= stage < num_stages.
std::vector<Action> BuildSchedule(ScheduleKind kind, int stage, int num_stages,
                                  int num_microbatches, int virtual_stages = 1);
// Adds the transfers to the compute orders of all stages (computes[s] for
// stage s; one F, B and W per (virtual stage, microbatch), F before B on
// each chunk), in lockstep rounds: in each round every stage runs its next
// compute if its input has arrived in an earlier round, and then, as one
// batch, sends what that compute produced while each neighbour receives it
// in the same round's batch. So every send meets its receive at one point
// of both schedules (a send follows its compute, a receive comes rounds
// before the compute that needs it), each stage sends at most one message
// per round, and the transfers cannot deadlock under rendezvous, nor pair
// up wrongly between two stages without tags. Rounds where a stage only
// receives join its previous batch. REQUIRES: the compute orders can run
// together (every input is produced before a stage must wait on it).
std::vector<std::vector<Action>> PlaceTransfers(
    const std::vector<std::vector<Action>>& computes, int virtual_stages);

// The receive, on the neighbour stage, that a send of `stage` is matched
// with. REQUIRES: IsSend(send.type).
Action MatchingReceive(const Action& send, int stage, int num_stages);

// A half-open range [begin, end) of positions in an action list.
struct ActionRange {
  int begin = 0;
  int end = 0;
  bool operator==(const ActionRange&) const = default;
};

// How transfers are posted.
enum class TransferGrouping {
  kBatched,   // each maximal run of consecutive transfers as one batch
  kOneByOne,  // each transfer alone (a batch of one)
};

// The batches of transfers in `actions`, in order, as posted under
// `grouping`; computes belong to none.
std::vector<ActionRange> TransferBatches(
    const std::vector<Action>& actions,
    TransferGrouping grouping = TransferGrouping::kBatched);

// BuildSchedule for every stage, indexed by stage.
std::vector<std::vector<Action>> BuildAllSchedules(ScheduleKind kind,
                                                   int num_stages,
                                                   int num_microbatches,
                                                   int virtual_stages = 1);

// Forward-only schedules of every stage (evaluation): each (virtual stage,
// microbatch) has one F and no B or W. Stages run microbatches in groups of
// num_stages, each group through its virtual stages in order (Megatron's
// interleaved order; the plain order with one virtual stage), with the
// transfers placed by PlaceTransfers, so they cannot deadlock under
// rendezvous. Any num_microbatches ≥ 1 works. REQUIRES: num_stages ≥ 1,
// virtual_stages ≥ 1, num_microbatches ≥ 1.
std::vector<std::vector<Action>> BuildForwardOnlySchedules(
    int num_stages, int num_microbatches, int virtual_stages = 1);

// Checks the schedules of all stages (per_stage[s] for stage s) together:
//  - every (virtual stage, microbatch) has exactly one F, B and W on every
//    stage, F before B before W;
//  - the receives a compute needs come before it and the sends of what it
//    produces after it, exactly one each, and none where there is no
//    neighbour chunk;
//  - every send is matched by a receive on the neighbour, in the same order;
//  - a joint simulation (sends never block, a receive blocks until its send
//    has been issued) completes: no deadlock;
//  - and, under TransferModel::kRendezvous (the default), the batched
//    transfers also complete under rendezvous (CheckRendezvous), as NCCL
//    runs them.
// Returns InvalidArgument naming the first problem (stage and action).
enum class TransferModel { kEager, kRendezvous };
absl::Status ValidateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int num_microbatches,
    int virtual_stages = 1, TransferModel model = TransferModel::kRendezvous);

// Runs the transfers of all stages together under rendezvous semantics,
// posted as `grouping` says (see "The validator" above). Computes take no
// time and wait for nothing: a compute's wait for its input is implied by
// the batch order. Returns InvalidArgument when the transfers between two
// stages do not pair up in order (naming both actions), or on a deadlock,
// naming every blocked stage, the action it waits at and what that waits
// for.
absl::Status CheckRendezvous(const std::vector<std::vector<Action>>& per_stage,
                             TransferGrouping grouping);

// The most microbatches (pairs of virtual stage and microbatch) whose F has
// run and whose W has not, over the list: the activation memory it needs.
int PeakInFlight(const std::vector<Action>& actions);

// The textbook bubble fraction (idle / total time of a stage) with uniform
// stages and free transfers: (P−1)/(m+P−1) for GPipe and 1F1B and
// (P−1)/(v·m+P−1) for interleaved 1F1B, which assume W is part of B; and
// (P−1)/(3m+P−1) for ZB-H1, which assumes F, B and W cost the same and
// m >= P. SimulateSchedules reproduces each under those assumptions; since
// these schedules send a gradient right after B, before W, a real W makes
// the GPipe and 1F1B bubbles somewhat smaller than the formula.
double TheoreticalBubble(ScheduleKind kind, int num_stages,
                         int num_microbatches, int virtual_stages = 1);

// Costs for SimulateSchedules, in any time unit, per chunk.
struct ActionCosts {
  double forward = 1.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
  double transfer = 0.0;  // from a send's issue to its receive's completion
};

// One action of a simulated timeline: a compute from its start to its end;
// a receive from when its stage reached the compute that needs it until its
// data had arrived (the wait; start == end at its posting if that compute
// never comes); a send at its issue (start == end).
struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
};

// The timeline of a joint simulation.
struct ScheduleSimulation {
  double makespan = 0.0;     // when the last stage finishes
  std::vector<double> busy;  // per stage: time spent computing
  // Per stage, every action in list order with its times.
  std::vector<std::vector<TimedAction>> timeline;
  // The mean over stages of 1 − busy / makespan.
  double BubbleFraction() const;
};

// Runs all stages together under the eager model (each stage runs its list
// in order; a receive is posted once its send has been issued, and the
// compute that needs it waits for the send plus the transfer cost, as the
// executor waits only there). Returns InvalidArgument on a deadlock or a
// mismatched transfer. Does not check compute counts: call
// ValidateSchedules for that.
absl::StatusOr<ScheduleSimulation> SimulateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int virtual_stages,
    const ActionCosts& costs = ActionCosts{});
// The same with costs per model chunk: chunk_costs[k] for global chunk k
// (virtual stage u of stage s is chunk u·P + s), e.g. when the first and
// last chunks also embed and compute the loss. A transfer costs what its
// sending chunk's `transfer` says. REQUIRES: chunk_costs.size() ==
// per_stage.size() · virtual_stages.
absl::StatusOr<ScheduleSimulation> SimulateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int virtual_stages,
    const std::vector<ActionCosts>& chunk_costs);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_SCHEDULE_H_
