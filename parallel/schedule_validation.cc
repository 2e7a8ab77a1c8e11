// ValidateSchedules: every stage's list complete and in order, then run
// under the eager and, where asked, the rendezvous transfer model (see
// schedule.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrCat;

// Where a stage's chunk sits in the whole model.
struct ChunkPlace {
  bool first;  // no activation comes in, no gradient goes out
  bool last;   // no activation goes out, no gradient comes in
};
ChunkPlace Place(int stage, int num_stages, int vstage, int virtual_stages) {
  const int chunk = vstage * num_stages + stage;
  return ChunkPlace{chunk == 0, chunk == num_stages * virtual_stages - 1};
}

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
  const std::string which = Action{ActionType::kForward, mb, u}.ToString();
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
    const Action a{TransferType(t), mb, u};
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

}  // namespace

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

}  // namespace trellis
