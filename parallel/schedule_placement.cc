// PlaceTransfers: the transfers of all stages' compute orders in lockstep
// rounds (see schedule.h).
#include <set>
#include <tuple>
#include <vector>

#include "framework/status.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

// What a stage has received: (activation?, virtual stage, microbatch).
using Arrival = std::tuple<bool, int, int>;

// A message sent in the current round.
struct Sent {
  int from = 0;
  int to = 0;
  Action send;
  Action recv;
};

class Placement {
 public:
  Placement(const std::vector<std::vector<Action>>& computes,
            int virtual_stages)
      : computes_(computes),
        num_stages_(static_cast<int>(computes.size())),
        chunks_(num_stages_ * virtual_stages),
        next_(computes.size(), 0),
        arrived_(computes.size()),
        actions_(computes.size()) {}

  std::vector<std::vector<Action>> Run() {
    while (!Done()) {
      std::vector<Sent> sent;
      bool computed = false;
      for (int s = 0; s < num_stages_; ++s) computed |= Step(s, sent);
      TRELLIS_CHECK(computed) << "the compute orders cannot run together";
      // This round's batches: each stage's send, then what it receives.
      for (const Sent& m : sent) actions_[m.from].push_back(m.send);
      for (const Sent& m : sent) {
        actions_[m.to].push_back(m.recv);
        arrived_[m.to].insert(
            Arrival(m.recv.type == ActionType::kRecvActivation,
                    m.recv.virtual_stage, m.recv.microbatch));
      }
    }
    return std::move(actions_);
  }

 private:
  bool Done() const {
    for (int s = 0; s < num_stages_; ++s) {
      if (next_[s] < computes_[s].size()) return false;
    }
    return true;
  }

  int Chunk(int stage, const Action& a) const {
    return a.virtual_stage * num_stages_ + stage;
  }

  // Runs stage s's next compute if its input has arrived; records what it
  // sends. Returns whether it ran.
  bool Step(int s, std::vector<Sent>& sent) {
    if (next_[s] == computes_[s].size()) return false;
    const Action& a = computes_[s][next_[s]];
    TRELLIS_CHECK(IsCompute(a.type)) << a.ToString() << " is no compute";
    const int chunk = Chunk(s, a);
    const bool forward = a.type == ActionType::kForward;
    const bool backward = a.type == ActionType::kBackwardInput;
    const bool needs_input =
        (forward && chunk > 0) || (backward && chunk < chunks_ - 1);
    if (needs_input && arrived_[s].count(Arrival(forward, a.virtual_stage,
                                                 a.microbatch)) == 0) {
      return false;
    }
    actions_[s].push_back(a);
    ++next_[s];
    const bool sends =
        (forward && chunk < chunks_ - 1) || (backward && chunk > 0);
    if (sends) {
      const Action send{
          forward ? ActionType::kSendActivation : ActionType::kSendGrad,
          a.microbatch, a.virtual_stage};
      sent.push_back(Sent{
          s, forward ? NextStage(s, num_stages_) : PrevStage(s, num_stages_),
          send, MatchingReceive(send, s, num_stages_)});
    }
    return true;
  }

  const std::vector<std::vector<Action>>& computes_;
  int num_stages_;
  int chunks_;
  std::vector<size_t> next_;                  // per stage: next compute
  std::vector<std::set<Arrival>> arrived_;    // per stage
  std::vector<std::vector<Action>> actions_;  // per stage: the result
};

}  // namespace

std::vector<std::vector<Action>> PlaceTransfers(
    const std::vector<std::vector<Action>>& computes, int virtual_stages) {
  TRELLIS_CHECK_GE(virtual_stages, 1);
  return Placement(computes, virtual_stages).Run();
}

}  // namespace trellis
