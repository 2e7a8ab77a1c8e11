#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "framework/status.h"

namespace trellis {
namespace {

using Clock = PipelineExecutor::Clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
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

  void PostRecv(const Key& key, Tensor buffer, int peer, int tag) {
    WaitForSendsOverlapping(buffer);
    TRELLIS_CHECK(recvs_.count(key) == 0) << "a second receive for one buffer";
    recvs_[key] = pipeline_.Recv(buffer, peer, tag);
  }

  void PostSend(Tensor buffer, int peer, int tag) {
    std::unique_ptr<Request> request = pipeline_.Send(buffer, peer, tag);
    sends_.push_back({std::move(buffer), std::move(request)});
  }

  // Waits for the receive of `key`, if one was posted.
  void WaitRecv(const Key& key) {
    auto it = recvs_.find(key);
    if (it == recvs_.end()) return;
    Timed([&] { it->second->Wait(); });
    recvs_.erase(it);
  }

  // Gives every transfer in flight a chance to move; drops finished sends.
  void Progress() {
    for (auto& [key, request] : recvs_) request->Poll();
    for (auto it = sends_.begin(); it != sends_.end();) {
      it = it->request->Poll() ? sends_.erase(it) : std::next(it);
    }
  }

  void Finish() {
    TRELLIS_CHECK(recvs_.empty())
        << recvs_.size() << " receives were never used";
    if (sends_.empty()) return;
    Timed([&] {
      for (Send& send : sends_) send.request->Wait();
    });
    sends_.clear();
  }

 private:
  struct Send {
    Tensor buffer;
    std::unique_ptr<Request> request;
  };

  template <typename Fn>
  void Timed(Fn&& fn) {
    const Clock::time_point start = Clock::now();
    fn();
    stats_.idle_seconds += Seconds(start, Clock::now());
  }

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

  Communicator& pipeline_;
  PipelineStepStats& stats_;
  std::map<Key, std::unique_ptr<Request>> recvs_;
  std::vector<Send> sends_;
};

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
  // Runs one compute after waiting for the receive it needs.
  auto compute = [&](const Action& a, const Transfers::Key& needs, auto&& fn) {
    transfers.WaitRecv(needs);
    ActionTiming t;
    t.start = Clock::now();
    if (device != nullptr) t.begin_mark = device->Mark();
    fn();
    if (device != nullptr) {
      t.end_mark = device->Mark();
      stats.device_computes.emplace_back(t.begin_mark, t.end_mark);
    }
    t.end = Clock::now();
    stats.busy_seconds += Seconds(t.start, t.end);
    if (observer_) observer_(a, t);
  };
  for (const Action& a : actions_) {
    const int u = a.virtual_stage, mb = a.microbatch;
    ActionTiming posted;
    posted.start = Clock::now();
    if (device != nullptr && !IsCompute(a.type)) {
      posted.begin_mark = device->Mark();
    }
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
      case ActionType::kRecvActivation:
        transfers.PostRecv({true, u, mb}, stage.InputActivation(u, mb), prev,
                           kActivationTag);
        break;
      case ActionType::kRecvGrad:
        transfers.PostRecv({false, u, mb}, stage.OutputGradient(u, mb), next,
                           kGradientTag);
        break;
      case ActionType::kSendActivation:
        transfers.PostSend(stage.OutputActivation(u, mb), next, kActivationTag);
        break;
      case ActionType::kSendGrad:
        transfers.PostSend(stage.InputGradient(u, mb), prev, kGradientTag);
        break;
    }
    if (!IsCompute(a.type)) {
      if (device != nullptr) posted.end_mark = device->Mark();
      posted.end = Clock::now();
      if (observer_) observer_(a, posted);
    }
    // Large messages move only inside MPI calls: poke them between actions
    // so a neighbour is not kept waiting until this stage's next wait.
    transfers.Progress();
    ++stats.actions;
  }
  transfers.Finish();
  if (device != nullptr) stats.device_end = device->Mark();
  stats.total_seconds = Seconds(step_start, Clock::now());
  return stats;
}

}  // namespace trellis
