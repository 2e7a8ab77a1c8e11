#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/status.h"

namespace trellis {
namespace {

using Clock = PipelineExecutor::Clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Runs fn and returns its span: wall-clock times, and the device clock's
// marks around it when there is one.
template <typename Fn>
ActionTiming TimeAction(TraceClock* device, Fn&& fn) {
  ActionTiming t;
  t.start = Clock::now();
  if (device != nullptr) t.begin_mark = device->Mark();
  fn();
  if (device != nullptr) t.end_mark = device->Mark();
  t.end = Clock::now();
  return t;
}

bool Overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage()) return false;
  const size_t a0 = a.byte_offset(), b0 = b.byte_offset();
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// The transfers of one step in flight on this stage.
class Transfers {
 public:
  // (is_activation, vstage, mb)
  using Key = std::tuple<bool, int, int>;

  Transfers(Communicator& pipeline, PipelineStepStats& stats)
      : pipeline_(pipeline), stats_(stats) {}

  // One transfer of a batch: the buffer, peer and tag, and for a receive
  // the key its compute waits on.
  struct Posting {
    P2POp op;
    Key key;
  };

  // Posts the transfers as one batch (Communicator::BatchSendRecv). A
  // receive into memory that a send of an earlier batch still reads waits
  // for that send first; one into memory that a receive whose compute has
  // not run yet fills is a broken buffer assignment.
  void PostBatch(std::vector<Posting> batch) {
    std::vector<P2POp> ops;
    ops.reserve(batch.size());
    for (Posting& p : batch) {
      if (p.op.type == P2POp::Type::kRecv) {
        WaitForSendsOverlapping(p.op.buffer);
        TRELLIS_CHECK(recvs_.count(p.key) == 0)
            << "a second receive for one buffer";
        for (const auto& [key, recv] : recvs_) {
          TRELLIS_CHECK(!Overlap(recv.buffer, p.op.buffer))
              << "a receive into a buffer whose earlier data is unused";
        }
      }
      ops.push_back(p.op);
    }
    std::vector<std::unique_ptr<Request>> requests =
        pipeline_.BatchSendRecv(ops);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].op.type == P2POp::Type::kRecv) {
        recvs_[batch[i].key] = {batch[i].op.buffer, std::move(requests[i])};
      } else {
        sends_.push_back({batch[i].op.buffer, std::move(requests[i])});
      }
    }
  }

  // Waits for the receive of `key`, if one was posted.
  void WaitRecv(const Key& key) {
    auto it = recvs_.find(key);
    if (it == recvs_.end()) return;
    Timed([&] { it->second.request->Wait(); });
    recvs_.erase(it);
  }

  // Waits for every send in flight that reads memory overlapping `buffer`
  // (before a compute writes it, or a receive lands in it).
  void WaitForSendsOverlapping(const Tensor& buffer) {
    for (auto it = sends_.begin(); it != sends_.end();) {
      if (!Overlap(it->buffer, buffer)) {
        ++it;
        continue;
      }
      Timed([&] { it->request->Wait(); });
      it = sends_.erase(it);
    }
  }

  // Gives every transfer in flight a chance to move; drops finished sends.
  void Progress() {
    for (auto& [key, recv] : recvs_) recv.request->Poll();
    for (auto it = sends_.begin(); it != sends_.end();) {
      it = it->request->Poll() ? sends_.erase(it) : std::next(it);
    }
  }

  void Finish() {
    TRELLIS_CHECK(recvs_.empty())
        << recvs_.size() << " receives were never used";
    if (sends_.empty()) return;
    Timed([&] {
      for (InFlight& send : sends_) send.request->Wait();
    });
    sends_.clear();
  }

 private:
  // A send or receive in flight and the buffer it reads or fills.
  struct InFlight {
    Tensor buffer;
    std::unique_ptr<Request> request;
  };

  template <typename Fn>
  void Timed(Fn&& fn) {
    const Clock::time_point start = Clock::now();
    fn();
    stats_.idle_seconds += Seconds(start, Clock::now());
  }

  Communicator& pipeline_;
  PipelineStepStats& stats_;
  std::map<Key, InFlight> recvs_;
  std::vector<InFlight> sends_;
};

// What a transfer action posts: into or from which buffer, to or from which
// neighbour.
Transfers::Posting MakePosting(const Action& a, PipelineStageCallbacks& stage,
                               int next, int prev) {
  const int u = a.virtual_stage, mb = a.microbatch;
  constexpr P2POp::Type kSend = P2POp::Type::kSend, kRecv = P2POp::Type::kRecv;
  constexpr int kAct = PipelineExecutor::kActivationTag;
  constexpr int kGrad = PipelineExecutor::kGradientTag;
  switch (a.type) {
    case ActionType::kRecvActivation:
      return {P2POp{kRecv, stage.InputActivation(u, mb), prev, kAct},
              {true, u, mb}};
    case ActionType::kRecvGrad:
      return {P2POp{kRecv, stage.OutputGradient(u, mb), next, kGrad},
              {false, u, mb}};
    case ActionType::kSendActivation:
      return {P2POp{kSend, stage.OutputActivation(u, mb), next, kAct}, {}};
    case ActionType::kSendGrad:
      return {P2POp{kSend, stage.InputGradient(u, mb), prev, kGrad}, {}};
    default:
      TRELLIS_CHECK(false) << a.ToString() << " is no transfer";
      return {};
  }
}

}  // namespace

double PipelineStepStats::BubbleFraction() const {
  const double total = busy_seconds + idle_seconds;
  return total > 0.0 ? idle_seconds / total : 0.0;
}

void PipelineStepStats::ResolveDeviceTime(TraceClock& clock) {
  if (device_start < 0) return;
  busy_seconds = 0.0;
  for (const auto& [begin, end] : device_computes) {
    busy_seconds += clock.Seconds(begin, end);
  }
  total_seconds = clock.Seconds(device_start, device_end);
  idle_seconds = std::max(0.0, total_seconds - busy_seconds);
  device_start = device_end = -1;
  device_computes.clear();
}

PipelineExecutor::PipelineExecutor(Communicator& pipeline,
                                   std::vector<Action> actions,
                                   int virtual_stages)
    : pipeline_(pipeline),
      actions_(std::move(actions)),
      virtual_stages_(virtual_stages) {
  TRELLIS_CHECK_GE(virtual_stages_, 1);
  for (const Action& a : actions_) {
    TRELLIS_CHECK(a.microbatch >= 0 && a.virtual_stage >= 0 &&
                  a.virtual_stage < virtual_stages_)
        << a.ToString() << " with " << virtual_stages_ << " virtual stages";
    TRELLIS_CHECK(pipeline_.size() > 1 || IsCompute(a.type))
        << a.ToString() << " in a pipeline of one stage";
    if (IsSend(a.type)) {
      const ActionType producer = a.type == ActionType::kSendActivation
                                      ? ActionType::kForward
                                      : ActionType::kBackwardInput;
      sent_outputs_.insert({producer, a.virtual_stage, a.microbatch});
    }
  }
}

PipelineStepStats PipelineExecutor::Run(PipelineStageCallbacks& stage) {
  PipelineStepStats stats;
  Transfers transfers(pipeline_, stats);
  const int s = pipeline_.rank(), num_stages = pipeline_.size();
  const int next = NextStage(s, num_stages), prev = PrevStage(s, num_stages);
  const Clock::time_point step_start = Clock::now();
  TraceClock* device = device_clock_.get();
  if (device != nullptr) stats.device_start = device->Mark();
  // Runs one compute after waiting for the receive it needs and, when it
  // writes a buffer that is then sent, for any earlier send still reading
  // that memory (buffers may be reused across microbatches).
  auto compute = [&](const Action& a, const Transfers::Key& needs, auto&& fn) {
    if (sent_outputs_.count({a.type, a.virtual_stage, a.microbatch}) > 0) {
      transfers.WaitForSendsOverlapping(
          a.type == ActionType::kForward
              ? stage.OutputActivation(a.virtual_stage, a.microbatch)
              : stage.InputGradient(a.virtual_stage, a.microbatch));
    }
    transfers.WaitRecv(needs);
    const ActionTiming t = TimeAction(device, fn);
    if (device != nullptr) {
      stats.device_computes.emplace_back(t.begin_mark, t.end_mark);
    }
    stats.busy_seconds += Seconds(t.start, t.end);
    if (observer_) observer_(a, t);
  };
  // Posts one batch of transfers; each of its actions is reported with the
  // batch's posting span.
  auto post = [&](const ActionRange& range) {
    const ActionTiming t = TimeAction(device, [&] {
      std::vector<Transfers::Posting> batch;
      for (int k = range.begin; k < range.end; ++k) {
        batch.push_back(MakePosting(actions_[k], stage, next, prev));
      }
      transfers.PostBatch(std::move(batch));
    });
    if (!observer_) return;
    for (int k = range.begin; k < range.end; ++k) observer_(actions_[k], t);
  };
  const std::vector<ActionRange> batches = TransferBatches(actions_);
  auto batch = batches.begin();
  for (size_t i = 0; i < actions_.size();) {
    const Action& a = actions_[i];
    const int u = a.virtual_stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        compute(a, {true, u, mb}, [&] { stage.Forward(u, mb); });
        break;
      case ActionType::kBackwardInput:
        compute(a, {false, u, mb}, [&] { stage.BackwardInput(u, mb); });
        break;
      case ActionType::kBackwardWeight:
        compute(a, {false, -1, -1}, [&] { stage.BackwardWeight(u, mb); });
        break;
      default:
        TRELLIS_CHECK(batch != batches.end() &&
                      batch->begin == static_cast<int>(i));
        post(*batch++);
        break;
    }
    const size_t done =
        IsCompute(a.type) ? 1 : static_cast<size_t>((batch - 1)->end) - i;
    // Large messages move only inside MPI calls: poke them between actions
    // so a neighbour is not kept waiting until this stage's next wait.
    transfers.Progress();
    stats.actions += static_cast<int64_t>(done);
    i += done;
  }
  transfers.Finish();
  if (device != nullptr) stats.device_end = device->Mark();
  stats.total_seconds = Seconds(step_start, Clock::now());
  return stats;
}

}  // namespace trellis
