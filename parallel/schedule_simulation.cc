// SimulateSchedules: the schedules run under the eager transfer model with
// per-chunk costs, giving each stage's timeline and busy time (see
// schedule.h).
#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrAppend;
using ::absl::StrCat;

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

}  // namespace trellis
