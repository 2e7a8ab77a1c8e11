// The schedule kinds and actions by name, each schedule family's compute
// order (GPipe, 1F1B and ZB-H1, interleaved 1F1B) and the builders that place
// their transfers; validation lives in schedule_validation.cc, simulation in
// schedule_simulation.cc (see schedule.h).
#include "parallel/schedule.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

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
