#include "parallel/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrAppend;
using ::absl::StrCat;

Action Make(ActionType type, int microbatch, int virtual_stage) {
  return Action{type, microbatch, virtual_stage};
}

// Where a stage's chunk sits in the whole model.
struct ChunkPlace {
  bool first;  // no activation comes in, no gradient goes out
  bool last;   // no activation goes out, no gradient comes in
};
ChunkPlace Place(int stage, int num_stages, int vstage, int virtual_stages) {
  const int chunk = vstage * num_stages + stage;
  return ChunkPlace{chunk == 0, chunk == num_stages * virtual_stages - 1};
}

// Appends B(mb) and, right after it, W(mb).
void AddBackward(std::vector<Action>& order, int mb, int vstage) {
  order.push_back(Make(ActionType::kBackwardInput, mb, vstage));
  order.push_back(Make(ActionType::kBackwardWeight, mb, vstage));
}

std::vector<Action> GPipeOrder(int m) {
  std::vector<Action> order;
  for (int mb = 0; mb < m; ++mb) {
    order.push_back(Make(ActionType::kForward, mb, 0));
  }
  for (int mb = 0; mb < m; ++mb) AddBackward(order, mb, 0);
  return order;
}

// PipeDream-flush. With `deferred_w` > 0, up to that many W are held back
// after their B (ZB-H1) and run once more are pending, or at the end.
std::vector<Action> OneFOneBOrder(int stage, int num_stages, int m,
                                  int deferred_w) {
  std::vector<Action> order;
  std::deque<int> pending_w;
  auto backward = [&](int mb) {
    order.push_back(Make(ActionType::kBackwardInput, mb, 0));
    pending_w.push_back(mb);
    while (static_cast<int>(pending_w.size()) > deferred_w) {
      order.push_back(Make(ActionType::kBackwardWeight, pending_w.front(), 0));
      pending_w.pop_front();
    }
  };
  const int warmup = std::min(num_stages - stage - 1, m);
  for (int mb = 0; mb < warmup; ++mb) {
    order.push_back(Make(ActionType::kForward, mb, 0));
  }
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back(Make(ActionType::kForward, warmup + i, 0));
    backward(i);
  }
  for (int mb = m - warmup; mb < m; ++mb) backward(mb);
  for (int mb : pending_w) {
    order.push_back(Make(ActionType::kBackwardWeight, mb, 0));
  }
  return order;
}

// Megatron-LM's interleaved 1F1B: virtual microbatch k runs microbatch
// (k / (P·v))·P + k mod P on virtual stage (k mod P·v) / P, reversed for
// backward. REQUIRES: m % P == 0.
std::vector<Action> InterleavedOrder(int stage, int num_stages, int m, int v) {
  const int total = m * v;
  const int group = num_stages * v;
  auto microbatch = [&](int k) {
    return k / group * num_stages + k % num_stages;
  };
  auto forward_vstage = [&](int k) { return k % group / num_stages; };
  const int warmup =
      std::min(total, (num_stages - stage - 1) * 2 + (v - 1) * num_stages);
  std::vector<Action> order;
  auto forward = [&](int k) {
    order.push_back(
        Make(ActionType::kForward, microbatch(k), forward_vstage(k)));
  };
  auto backward = [&](int k) {
    AddBackward(order, microbatch(k), v - 1 - forward_vstage(k));
  };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int i = 0; i < total - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int k = total - warmup; k < total; ++k) backward(k);
  return order;
}

// ----- Validation ------------------------------------------------------

// A position in a stage's list per (virtual stage, microbatch, slot), or -1.
class PositionIndex {
 public:
  PositionIndex(int v, int m, int slots)
      : m_(m), slots_(slots), pos_(static_cast<size_t>(v) * m * slots, -1) {}
  int& at(int vstage, int mb, int slot) {
    return pos_[(static_cast<size_t>(vstage) * m_ + mb) * slots_ + slot];
  }

 private:
  int m_;
  int slots_;
  std::vector<int> pos_;
};

// Slots: computes F, B, W = 0, 1, 2; transfers in ActionType order.
int ComputeSlot(ActionType type) { return static_cast<int>(type); }
int TransferSlot(ActionType type) {
  return static_cast<int>(type) - static_cast<int>(ActionType::kSendActivation);
}
ActionType TransferType(int slot) {
  return static_cast<ActionType>(slot +
                                 static_cast<int>(ActionType::kSendActivation));
}

// Whether a chunk takes part in a transfer kind, and the compute it serves.
bool TransferNeeded(ActionType type, const ChunkPlace& place) {
  switch (type) {
    case ActionType::kRecvActivation:
    case ActionType::kSendGrad:
      return !place.first;
    case ActionType::kSendActivation:
    case ActionType::kRecvGrad:
      return !place.last;
    default:
      return false;
  }
}
ActionType ServedCompute(ActionType type) {
  return type == ActionType::kSendActivation ||
                 type == ActionType::kRecvActivation
             ? ActionType::kForward
             : ActionType::kBackwardInput;
}

// Records every action's position; rejects out-of-range, duplicated and
// needless actions.
absl::Status IndexActions(const std::vector<Action>& actions, int stage,
                          int num_stages, int m, int v, PositionIndex& compute,
                          PositionIndex& transfer) {
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (a.microbatch < 0 || a.microbatch >= m || a.virtual_stage < 0 ||
        a.virtual_stage >= v) {
      return InvalidArgumentError(StrCat("stage ", stage, ": ", a.ToString(),
                                         " is outside ", m, " microbatches × ",
                                         v, " virtual stages"));
    }
    if (!IsCompute(a.type) &&
        !TransferNeeded(a.type, Place(stage, num_stages, a.virtual_stage, v))) {
      return InvalidArgumentError(StrCat("stage ", stage, ": ", a.ToString(),
                                         " has no neighbour chunk"));
    }
    int& pos =
        IsCompute(a.type)
            ? compute.at(a.virtual_stage, a.microbatch, ComputeSlot(a.type))
            : transfer.at(a.virtual_stage, a.microbatch, TransferSlot(a.type));
    if (pos >= 0) {
      return InvalidArgumentError(
          StrCat("stage ", stage, ": ", a.ToString(), " appears twice"));
    }
    pos = i;
  }
  return absl::OkStatus();
}

// Checks one (virtual stage, microbatch): F, B and W present and in order,
// each needed transfer present, receives before and sends after their
// compute.
absl::Status CheckMicrobatch(int stage, int num_stages, int v, int u, int mb,
                             PositionIndex& compute, PositionIndex& transfer) {
  static constexpr const char* kComputeNames[] = {"F", "B", "W"};
  const std::string which = Make(ActionType::kForward, mb, u).ToString();
  for (int c = 0; c < 3; ++c) {
    if (compute.at(u, mb, c) < 0) {
      return InvalidArgumentError(
          StrCat("stage ", stage, ": no ", kComputeNames[c], " for ", which));
    }
  }
  if (compute.at(u, mb, 0) > compute.at(u, mb, 1) ||
      compute.at(u, mb, 1) > compute.at(u, mb, 2)) {
    return InvalidArgumentError(StrCat("stage ", stage, ": F, B and W of ",
                                       which, " are not in that order"));
  }
  const ChunkPlace place = Place(stage, num_stages, u, v);
  for (int t = 0; t < 4; ++t) {
    const Action a = Make(TransferType(t), mb, u);
    if (!TransferNeeded(a.type, place)) continue;
    const int pos = transfer.at(u, mb, t);
    if (pos < 0) {
      return InvalidArgumentError(
          StrCat("stage ", stage, ": ", a.ToString(), " is missing"));
    }
    const int served = compute.at(u, mb, ComputeSlot(ServedCompute(a.type)));
    if (IsRecv(a.type) ? pos > served : pos < served) {
      return InvalidArgumentError(StrCat(
          "stage ", stage, ": ", a.ToString(), " comes ",
          IsRecv(a.type) ? "after" : "before", " the compute it serves"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStage(const std::vector<Action>& actions, int stage,
                        int num_stages, int m, int v) {
  PositionIndex compute(v, m, 3), transfer(v, m, 4);
  TRELLIS_RETURN_IF_ERROR(
      IndexActions(actions, stage, num_stages, m, v, compute, transfer));
  for (int u = 0; u < v; ++u) {
    for (int mb = 0; mb < m; ++mb) {
      TRELLIS_RETURN_IF_ERROR(
          CheckMicrobatch(stage, num_stages, v, u, mb, compute, transfer));
    }
  }
  return absl::OkStatus();
}

// ----- Simulation ------------------------------------------------------

// A message in flight: the action the receiver must post for it, and when
// it can complete.
struct Message {
  Action recv;
  double ready = 0.0;
};

double ComputeCost(ActionType type, const ActionCosts& costs) {
  switch (type) {
    case ActionType::kForward:
      return costs.forward;
    case ActionType::kBackwardInput:
      return costs.backward_input;
    case ActionType::kBackwardWeight:
      return costs.backward_weight;
    default:
      return 0.0;
  }
}

// The costs of `stage`'s virtual stage `vstage`: chunk vstage·P + stage.
const ActionCosts& CostsOf(const std::vector<ActionCosts>& chunk_costs,
                           int stage, int num_stages, int vstage) {
  return chunk_costs[static_cast<size_t>(vstage * num_stages + stage)];
}

// The message a send puts on its channel.
Message Deliver(const Action& send, int stage, int num_stages, double now,
                const ActionCosts& costs) {
  return Message{MatchingReceive(send, stage, num_stages),
                 now + costs.transfer};
}

// A receive posted but not yet waited for: its place in the timeline and
// when its data arrives. Keyed by (activation?, virtual stage, microbatch).
using PendingKey = std::tuple<bool, int, int>;
struct Pending {
  size_t timeline_index = 0;
  double ready = 0.0;
};

struct SimState {
  std::vector<size_t> next;               // per stage: next action
  std::vector<double> clock;              // per stage
  std::vector<std::deque<Message>> act;   // sent by stage s to s + 1
  std::vector<std::deque<Message>> grad;  // sent by stage s to s − 1
  std::vector<std::map<PendingKey, Pending>> pending;  // per stage
};

// Before a compute: waits for the data of the receive it needs, if any, and
// records that wait as the receive's span.
void WaitForInput(const Action& a, int stage, SimState& st,
                  ScheduleSimulation& sim) {
  if (a.type == ActionType::kBackwardWeight) return;
  auto it = st.pending[stage].find(PendingKey(a.type == ActionType::kForward,
                                              a.virtual_stage, a.microbatch));
  if (it == st.pending[stage].end()) return;
  double& clock = st.clock[stage];
  TimedAction& recv = sim.timeline[stage][it->second.timeline_index];
  recv.start = clock;
  clock = std::max(clock, it->second.ready);
  recv.end = clock;
  st.pending[stage].erase(it);
}

// Runs `stage` until it finishes or reaches a receive whose send has not
// been issued. A receive is posted there, but the stage's time waits for
// its data only at the compute that needs it (as the executor does).
// Returns whether it advanced; sets `status` on a mismatched receive.
bool Advance(const std::vector<Action>& actions, int stage, int num_stages,
             const std::vector<ActionCosts>& chunk_costs, SimState& st,
             ScheduleSimulation& sim, absl::Status& status) {
  bool advanced = false;
  while (st.next[stage] < actions.size()) {
    const Action& a = actions[st.next[stage]];
    const ActionCosts& costs =
        CostsOf(chunk_costs, stage, num_stages, a.virtual_stage);
    double& clock = st.clock[stage];
    if (IsCompute(a.type)) WaitForInput(a, stage, st, sim);
    const double start = clock;
    if (IsRecv(a.type)) {
      const bool activation = a.type == ActionType::kRecvActivation;
      std::deque<Message>& channel =
          activation ? st.act[PrevStage(stage, num_stages)]
                     : st.grad[NextStage(stage, num_stages)];
      if (channel.empty()) break;
      if (!(channel.front().recv == a)) {
        status = InvalidArgumentError(StrCat(
            "stage ", stage, " posts ", a.ToString(), " but stage ",
            activation ? PrevStage(stage, num_stages)
                       : NextStage(stage, num_stages),
            " sent the data for ", channel.front().recv.ToString(), " first"));
        return false;
      }
      st.pending[stage][PendingKey(activation, a.virtual_stage, a.microbatch)] =
          Pending{sim.timeline[stage].size(), channel.front().ready};
      channel.pop_front();
    } else if (IsSend(a.type)) {
      (a.type == ActionType::kSendActivation ? st.act : st.grad)[stage]
          .push_back(Deliver(a, stage, num_stages, clock, costs));
    } else {
      const double cost = ComputeCost(a.type, costs);
      clock += cost;
      sim.busy[stage] += cost;
    }
    sim.timeline[stage].push_back(TimedAction{a, start, clock});
    ++st.next[stage];
    advanced = true;
  }
  return advanced;
}

std::string DeadlockMessage(const std::vector<std::vector<Action>>& per_stage,
                            const SimState& st) {
  std::string message = "the schedules deadlock:";
  for (size_t s = 0; s < per_stage.size(); ++s) {
    if (st.next[s] < per_stage[s].size()) {
      StrAppend(&message, " stage ", s, " waits at ",
                per_stage[s][st.next[s]].ToString(), ";");
    }
  }
  return message;
}

}  // namespace

const char* ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved-1f1b";
    case ScheduleKind::kZeroBubbleH1:
      return "zb-h1";
  }
  return "?";
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(const std::string& name) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
        ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1}) {
    if (name == ScheduleKindName(kind)) return kind;
  }
  return InvalidArgumentError(
      StrCat("unknown pipeline schedule \"", name,
             "\"; choose gpipe, 1f1b, interleaved-1f1b or zb-h1"));
}

absl::Status CheckScheduleShape(ScheduleKind kind, int num_stages,
                                int num_microbatches, int virtual_stages) {
  if (num_stages < 1 || num_microbatches < 1 || virtual_stages < 1) {
    return InvalidArgumentError(StrCat(
        "pipeline stages (", num_stages, "), microbatches (", num_microbatches,
        ") and virtual stages (", virtual_stages, ") must all be at least 1"));
  }
  if (kind != ScheduleKind::kInterleaved1F1B && virtual_stages != 1) {
    return InvalidArgumentError(StrCat("the ", ScheduleKindName(kind),
                                       " schedule has one virtual "
                                       "stage per stage, not ",
                                       virtual_stages,
                                       "; use interleaved-1f1b for more"));
  }
  if (virtual_stages > 1 && num_stages == 1) {
    return InvalidArgumentError(
        StrCat("interleaved-1f1b with ", virtual_stages,
               " virtual stages needs at least 2 pipeline stages; use 1f1b"));
  }
  if (kind == ScheduleKind::kInterleaved1F1B &&
      num_microbatches % num_stages != 0) {
    return InvalidArgumentError(
        StrCat("interleaved-1f1b needs the microbatches (", num_microbatches,
               ") to be a multiple of the pipeline stages (", num_stages, ")"));
  }
  return absl::OkStatus();
}

const char* ActionTypeName(ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return "F";
    case ActionType::kBackwardInput:
      return "B";
    case ActionType::kBackwardWeight:
      return "W";
    case ActionType::kSendActivation:
      return "SendAct";
    case ActionType::kRecvActivation:
      return "RecvAct";
    case ActionType::kSendGrad:
      return "SendGrad";
    case ActionType::kRecvGrad:
      return "RecvGrad";
  }
  return "?";
}

std::string Action::ToString() const {
  std::string s = StrCat(ActionTypeName(type), microbatch);
  if (virtual_stage != 0) StrAppend(&s, "@", virtual_stage);
  return s;
}

std::string ActionsString(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) {
    if (!s.empty()) s += ' ';
    s += a.ToString();
  }
  return s;
}

namespace {

// The computes of `stage` in the order `kind` runs them.
std::vector<Action> ComputeOrder(ScheduleKind kind, int stage, int num_stages,
                                 int num_microbatches, int virtual_stages) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return GPipeOrder(num_microbatches);
    case ScheduleKind::k1F1B:
      return OneFOneBOrder(stage, num_stages, num_microbatches, 0);
    case ScheduleKind::kInterleaved1F1B:
      return virtual_stages == 1
                 ? OneFOneBOrder(stage, num_stages, num_microbatches, 0)
                 : InterleavedOrder(stage, num_stages, num_microbatches,
                                    virtual_stages);
    case ScheduleKind::kZeroBubbleH1:
      return OneFOneBOrder(stage, num_stages, num_microbatches, stage);
  }
  return {};
}

}  // namespace

std::vector<Action> BuildSchedule(ScheduleKind kind, int stage, int num_stages,
                                  int num_microbatches, int virtual_stages) {
  TRELLIS_CHECK(stage >= 0 && stage < num_stages) << "stage " << stage;
  return BuildAllSchedules(kind, num_stages, num_microbatches,
                           virtual_stages)[stage];
}

Action MatchingReceive(const Action& send, int stage, int num_stages) {
  TRELLIS_CHECK(IsSend(send.type)) << send.ToString() << " is no send";
  const int chunk = send.virtual_stage * num_stages + stage;
  const bool activation = send.type == ActionType::kSendActivation;
  const int to = activation ? chunk + 1 : chunk - 1;
  return Make(activation ? ActionType::kRecvActivation : ActionType::kRecvGrad,
              send.microbatch, to / num_stages);
}

std::vector<ActionRange> TransferBatches(const std::vector<Action>& actions,
                                         TransferGrouping grouping) {
  std::vector<ActionRange> batches;
  const int n = static_cast<int>(actions.size());
  for (int i = 0; i < n;) {
    if (IsCompute(actions[i].type)) {
      ++i;
      continue;
    }
    int end = i + 1;
    if (grouping == TransferGrouping::kBatched) {
      while (end < n && !IsCompute(actions[end].type)) ++end;
    }
    batches.push_back(ActionRange{i, end});
    i = end;
  }
  return batches;
}

std::vector<std::vector<Action>> BuildAllSchedules(ScheduleKind kind,
                                                   int num_stages,
                                                   int num_microbatches,
                                                   int virtual_stages) {
  const absl::Status shape =
      CheckScheduleShape(kind, num_stages, num_microbatches, virtual_stages);
  TRELLIS_CHECK(shape.ok()) << shape;
  std::vector<std::vector<Action>> computes;
  for (int s = 0; s < num_stages; ++s) {
    computes.push_back(
        ComputeOrder(kind, s, num_stages, num_microbatches, virtual_stages));
  }
  return PlaceTransfers(computes, virtual_stages);
}

absl::Status ValidateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int num_microbatches,
    int virtual_stages, TransferModel model) {
  const int num_stages = static_cast<int>(per_stage.size());
  if (num_stages < 1 || num_microbatches < 1 || virtual_stages < 1) {
    return InvalidArgumentError("a schedule needs stages and microbatches");
  }
  for (int s = 0; s < num_stages; ++s) {
    TRELLIS_RETURN_IF_ERROR(CheckStage(per_stage[s], s, num_stages,
                                       num_microbatches, virtual_stages));
  }
  TRELLIS_RETURN_IF_ERROR(
      SimulateSchedules(per_stage, virtual_stages).status());
  if (model == TransferModel::kEager) return absl::OkStatus();
  return CheckRendezvous(per_stage, TransferGrouping::kBatched);
}

absl::StatusOr<ScheduleSimulation> SimulateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int virtual_stages,
    const ActionCosts& costs) {
  return SimulateSchedules(
      per_stage, virtual_stages,
      std::vector<ActionCosts>(per_stage.size() * virtual_stages, costs));
}

absl::StatusOr<ScheduleSimulation> SimulateSchedules(
    const std::vector<std::vector<Action>>& per_stage, int virtual_stages,
    const std::vector<ActionCosts>& chunk_costs) {
  const int num_stages = static_cast<int>(per_stage.size());
  TRELLIS_CHECK_EQ(chunk_costs.size(),
                   static_cast<size_t>(num_stages * virtual_stages));
  SimState st{std::vector<size_t>(num_stages, 0),
              std::vector<double>(num_stages, 0.0),
              std::vector<std::deque<Message>>(num_stages),
              std::vector<std::deque<Message>>(num_stages),
              std::vector<std::map<PendingKey, Pending>>(num_stages)};
  ScheduleSimulation sim;
  sim.busy.assign(num_stages, 0.0);
  sim.timeline.resize(num_stages);
  absl::Status status;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < num_stages; ++s) {
      progress |=
          Advance(per_stage[s], s, num_stages, chunk_costs, st, sim, status);
      TRELLIS_RETURN_IF_ERROR(status);
    }
  }
  for (int s = 0; s < num_stages; ++s) {
    if (st.next[s] < per_stage[s].size()) {
      return InvalidArgumentError(DeadlockMessage(per_stage, st));
    }
    for (const auto* channel : {&st.act[s], &st.grad[s]}) {
      if (!channel->empty()) {
        return InvalidArgumentError(StrCat("stage ", s, " sends data for ",
                                           channel->front().recv.ToString(),
                                           " that is never received"));
      }
    }
    sim.makespan = std::max(sim.makespan, st.clock[s]);
  }
  return sim;
}

double ScheduleSimulation::BubbleFraction() const {
  if (busy.empty() || makespan <= 0.0) return 0.0;
  double idle = 0.0;
  for (double b : busy) idle += 1.0 - b / makespan;
  return idle / static_cast<double>(busy.size());
}

int PeakInFlight(const std::vector<Action>& actions) {
  std::vector<std::pair<int, int>> live;  // (virtual stage, microbatch)
  size_t peak = 0;
  for (const Action& a : actions) {
    const std::pair<int, int> key(a.virtual_stage, a.microbatch);
    if (a.type == ActionType::kForward) {
      live.push_back(key);
      peak = std::max(peak, live.size());
    } else if (a.type == ActionType::kBackwardWeight) {
      auto it = std::find(live.begin(), live.end(), key);
      if (it != live.end()) live.erase(it);
    }
  }
  return static_cast<int>(peak);
}

double TheoreticalBubble(ScheduleKind kind, int num_stages,
                         int num_microbatches, int virtual_stages) {
  const double idle = num_stages - 1;
  double work = num_microbatches;  // in units of one stage's F + B + W
  if (kind == ScheduleKind::kInterleaved1F1B) {
    work *= virtual_stages;
  } else if (kind == ScheduleKind::kZeroBubbleH1) {
    work *= 3;  // the bubble shrinks from F + B + W to F + B − W = one third
  }
  return idle / (work + idle);
}

}  // namespace trellis
