#include "parallel/pipeline_buffers.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/status.h"

namespace trellis {
namespace {

// (type, virtual stage, microbatch): an action's identity in one list.
using ActionKey = std::tuple<ActionType, int, int>;

ActionKey KeyOf(const Action& a) {
  return {a.type, a.virtual_stage, a.microbatch};
}

// The compute a transfer belongs to (schedule.h: a send follows the compute
// that produced it, a receive precedes the compute that needs it).
ActionType ComputeOf(ActionType transfer) {
  switch (transfer) {
    case ActionType::kRecvActivation:
    case ActionType::kSendActivation:
      return ActionType::kForward;
    case ActionType::kRecvGrad:
    case ActionType::kSendGrad:
      return ActionType::kBackwardInput;
    default:
      TRELLIS_CHECK(false) << ActionTypeName(transfer) << " is no transfer";
      return ActionType::kForward;
  }
}

}  // namespace

const char* PipelineBufferName(PipelineBuffer kind) {
  switch (kind) {
    case PipelineBuffer::kInputActivation:
      return "input activation";
    case PipelineBuffer::kOutputActivation:
      return "output activation";
    case PipelineBuffer::kOutputGradient:
      return "output gradient";
    case PipelineBuffer::kInputGradient:
      return "input gradient";
  }
  return "?";
}

PipelineBuffer BufferOfTransfer(ActionType t) {
  switch (t) {
    case ActionType::kRecvActivation:
      return PipelineBuffer::kInputActivation;
    case ActionType::kSendActivation:
      return PipelineBuffer::kOutputActivation;
    case ActionType::kRecvGrad:
      return PipelineBuffer::kOutputGradient;
    case ActionType::kSendGrad:
      return PipelineBuffer::kInputGradient;
    default:
      TRELLIS_CHECK(false) << ActionTypeName(t) << " is no transfer";
      return PipelineBuffer::kInputActivation;
  }
}

std::vector<BufferLife> BufferLives(const std::vector<Action>& actions) {
  std::map<ActionKey, int> computes;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (IsCompute(actions[i].type)) {
      computes[KeyOf(actions[i])] = static_cast<int>(i);
    }
  }
  std::vector<BufferLife> lives;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (IsCompute(a.type)) continue;
    auto it = computes.find({ComputeOf(a.type), a.virtual_stage, a.microbatch});
    TRELLIS_CHECK(it != computes.end())
        << a.ToString() << " without its compute in the list";
    const int here = static_cast<int>(i), compute = it->second;
    BufferLife life{BufferOfTransfer(a.type), a.virtual_stage, a.microbatch,
                    IsRecv(a.type) ? here : compute,
                    IsRecv(a.type) ? compute : here};
    TRELLIS_CHECK_LT(life.begin, life.end)
        << a.ToString() << " on the wrong side of its compute";
    lives.push_back(life);
  }
  return lives;
}

PipelineBufferSlots PipelineBufferSlots::Assign(
    const std::vector<Action>& actions, int virtual_stages) {
  TRELLIS_CHECK_GE(virtual_stages, 1);
  PipelineBufferSlots s;
  s.virtual_stages_ = virtual_stages;
  s.counts_.assign(kNumPipelineBuffers * virtual_stages, 0);
  std::vector<BufferLife> lives = BufferLives(actions);
  std::sort(lives.begin(), lives.end(),
            [](const BufferLife& a, const BufferLife& b) {
              return a.begin < b.begin;
            });
  // Per (kind, virtual stage): the slots in use as (end, slot), soonest
  // ending first, and the free ones, lowest first.
  using Busy = std::pair<int, int>;
  struct Pool {
    std::priority_queue<Busy, std::vector<Busy>, std::greater<Busy>> busy;
    std::set<int> free;
  };
  std::vector<Pool> pools(s.counts_.size());
  for (const BufferLife& life : lives) {
    TRELLIS_CHECK(life.virtual_stage >= 0 &&
                  life.virtual_stage < virtual_stages);
    const int index =
        static_cast<int>(life.kind) * virtual_stages + life.virtual_stage;
    Pool& pool = pools[index];
    while (!pool.busy.empty() && pool.busy.top().first < life.begin) {
      pool.free.insert(pool.busy.top().second);
      pool.busy.pop();
    }
    int slot;
    if (pool.free.empty()) {
      slot = s.counts_[index]++;
    } else {
      slot = *pool.free.begin();
      pool.free.erase(pool.free.begin());
    }
    pool.busy.push({life.end, slot});
    const bool fresh =
        s.slots_
            .emplace(std::make_tuple(static_cast<int>(life.kind),
                                     life.virtual_stage, life.microbatch),
                     slot)
            .second;
    TRELLIS_CHECK(fresh) << PipelineBufferName(life.kind) << " of microbatch "
                         << life.microbatch << " moved twice";
  }
  return s;
}

int PipelineBufferSlots::count(PipelineBuffer kind, int vstage) const {
  if (vstage < 0 || vstage >= virtual_stages_) return 0;
  return counts_[static_cast<int>(kind) * virtual_stages_ + vstage];
}

int PipelineBufferSlots::slot(PipelineBuffer kind, int vstage, int mb) const {
  auto it = slots_.find({static_cast<int>(kind), vstage, mb});
  TRELLIS_CHECK(it != slots_.end())
      << "the schedule moves no " << PipelineBufferName(kind)
      << " of microbatch " << mb << " on virtual stage " << vstage;
  return it->second;
}

void PipelineBufferSlots::Widen(const PipelineBufferSlots& other) {
  if (other.virtual_stages_ == 0) return;
  if (virtual_stages_ == 0) {
    virtual_stages_ = other.virtual_stages_;
    counts_.assign(other.counts_.size(), 0);
  }
  TRELLIS_CHECK_EQ(virtual_stages_, other.virtual_stages_);
  for (size_t i = 0; i < counts_.size(); ++i) {
    counts_[i] = std::max(counts_[i], other.counts_[i]);
  }
}

std::string PipelineBufferSlots::CountsString() const {
  std::vector<std::string> parts;
  for (int k = 0; k < kNumPipelineBuffers; ++k) {
    std::vector<int> per_stage;
    for (int v = 0; v < virtual_stages_; ++v) {
      per_stage.push_back(count(static_cast<PipelineBuffer>(k), v));
    }
    parts.push_back(
        absl::StrCat(PipelineBufferName(static_cast<PipelineBuffer>(k)), ": ",
                     absl::StrJoin(per_stage, " | ")));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace trellis
