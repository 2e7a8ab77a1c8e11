// CheckRendezvous: the schedules' transfers run as NCCL runs them (see
// schedule.h). Each stage posts its batches in order; a batch completes
// once the partner of each of its transfers sits in a batch that has
// started on the peer (its index is at most the peer's current batch).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

using ::absl::InvalidArgumentError;
using ::absl::StrAppend;
using ::absl::StrCat;

// A transfer: its stage and its position in that stage's list.
struct Endpoint {
  int stage = -1;
  int index = -1;
};

// The stage a transfer of `stage` talks to.
int PeerOf(ActionType type, int stage, int num_stages) {
  const bool to_next =
      type == ActionType::kSendActivation || type == ActionType::kRecvGrad;
  return to_next ? NextStage(stage, num_stages) : PrevStage(stage, num_stages);
}

// The transfers from one stage to another, in posting order on each side.
struct Link {
  std::vector<Endpoint> sends;  // on the sender
  std::vector<Endpoint> recvs;  // on the receiver
};

class Rendezvous {
 public:
  Rendezvous(const std::vector<std::vector<Action>>& per_stage,
             TransferGrouping grouping)
      : per_stage_(per_stage),
        num_stages_(static_cast<int>(per_stage.size())),
        batches_(per_stage.size()),
        batch_of_(per_stage.size()),
        partner_(per_stage.size()),
        current_(per_stage.size(), 0) {
    for (int s = 0; s < num_stages_; ++s) {
      batches_[s] = TransferBatches(per_stage[s], grouping);
      batch_of_[s].assign(per_stage[s].size(), -1);
      partner_[s].assign(per_stage[s].size(), Endpoint{});
      for (int b = 0; b < static_cast<int>(batches_[s].size()); ++b) {
        for (int i = batches_[s][b].begin; i < batches_[s][b].end; ++i) {
          batch_of_[s][i] = b;
        }
      }
    }
  }

  // Pairs every send with the receive posted in the same place on its link.
  absl::Status Match() {
    std::map<std::pair<int, int>, Link> links;  // by (from, to)
    for (int s = 0; s < num_stages_; ++s) {
      for (int i = 0; i < static_cast<int>(per_stage_[s].size()); ++i) {
        const ActionType type = per_stage_[s][i].type;
        if (IsCompute(type)) continue;
        const int peer = PeerOf(type, s, num_stages_);
        if (IsSend(type)) {
          links[{s, peer}].sends.push_back(Endpoint{s, i});
        } else {
          links[{peer, s}].recvs.push_back(Endpoint{s, i});
        }
      }
    }
    for (const auto& [route, link] : links) {
      TRELLIS_RETURN_IF_ERROR(MatchLink(route.first, route.second, link));
    }
    return absl::OkStatus();
  }

  // Advances every stage as far as it goes; returns a deadlock's report.
  absl::Status Run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < num_stages_; ++s) {
        while (current_[s] < static_cast<int>(batches_[s].size()) &&
               BlockedAt(s) < 0) {
          ++current_[s];
          progress = true;
        }
      }
    }
    std::string message;
    for (int s = 0; s < num_stages_; ++s) {
      if (current_[s] == static_cast<int>(batches_[s].size())) continue;
      const int i = BlockedAt(s);
      const Endpoint p = partner_[s][i];
      StrAppend(&message, message.empty() ? "" : "; ", "stage ", s,
                " waits at ", per_stage_[s][i].ToString(), " for stage ",
                p.stage, "'s ", per_stage_[p.stage][p.index].ToString());
    }
    if (message.empty()) return absl::OkStatus();
    return InvalidArgumentError(
        StrCat("the transfers deadlock when a send waits for its receive "
               "(NCCL): ",
               message));
  }

 private:
  absl::Status MatchLink(int from, int to, const Link& link) {
    const size_t n = std::min(link.sends.size(), link.recvs.size());
    for (size_t k = 0; k < n; ++k) {
      const Endpoint send = link.sends[k], recv = link.recvs[k];
      const Action& sent = per_stage_[from][send.index];
      const Action& received = per_stage_[to][recv.index];
      const Action expected = MatchingReceive(sent, from, num_stages_);
      if (!(expected == received)) {
        return InvalidArgumentError(StrCat(
            "stage ", to, " posts ", received.ToString(), " as its receive ", k,
            " from stage ", from, ", but stage ", from, "'s send ", k,
            " to it is ", sent.ToString(), " (for ", expected.ToString(),
            "); without tags transfers pair up in the order posted"));
      }
      partner_[from][send.index] = recv;
      partner_[to][recv.index] = send;
    }
    if (link.sends.size() > n) {
      return InvalidArgumentError(
          StrCat("stage ", from, " sends ",
                 per_stage_[from][link.sends[n].index].ToString(), " to stage ",
                 to, ", which never receives it"));
    }
    if (link.recvs.size() > n) {
      return InvalidArgumentError(
          StrCat("stage ", to, " posts ",
                 per_stage_[to][link.recvs[n].index].ToString(), " but stage ",
                 from, " never sends it"));
    }
    return absl::OkStatus();
  }

  // The first transfer of stage s's current batch whose partner has not
  // started, or -1 when the batch can complete.
  int BlockedAt(int s) const {
    const ActionRange batch = batches_[s][current_[s]];
    for (int i = batch.begin; i < batch.end; ++i) {
      const Endpoint p = partner_[s][i];
      if (batch_of_[p.stage][p.index] > current_[p.stage]) return i;
    }
    return -1;
  }

  const std::vector<std::vector<Action>>& per_stage_;
  int num_stages_;
  std::vector<std::vector<ActionRange>> batches_;  // per stage
  std::vector<std::vector<int>> batch_of_;      // per stage and action, or -1
  std::vector<std::vector<Endpoint>> partner_;  // per stage and action
  std::vector<int> current_;                    // per stage: batch now run
};

}  // namespace

absl::Status CheckRendezvous(const std::vector<std::vector<Action>>& per_stage,
                             TransferGrouping grouping) {
  Rendezvous rendezvous(per_stage, grouping);
  TRELLIS_RETURN_IF_ERROR(rendezvous.Match());
  return rendezvous.Run();
}

}  // namespace trellis
