#include "parallel/watchdog_communicator.h"

#include <signal.h>

#include <numeric>
#include <utility>

#include "framework/status.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/routing_communicator.h"

namespace trellis {
namespace {

// Waits for its inner request under the watchdog's deadline, and marks its
// record done once complete.
class WatchedRequest : public Request {
 public:
  WatchedRequest(Watchdog& watchdog, std::unique_ptr<Request> inner, int64_t id,
                 bool polled, Device device)
      : watchdog_(watchdog),
        inner_(std::move(inner)),
        id_(id),
        polled_(polled),
        device_(device) {}
  ~WatchedRequest() override { Wait(); }

  void Wait() override {
    if (done_) return;
    if (polled_) {
      const absl::Status status = watchdog_.Await(*inner_, id_);
      if (!status.ok()) watchdog_.Fail(id_);
    }
    inner_->Wait();
    Done();
  }

  bool Poll() override {
    if (done_) return true;
    if (inner_->Poll()) {
      inner_->Wait();
      Done();
    }
    return done_;
  }

 private:
  // A host wait is over; a device one has ordered the compute stream
  // after the operation, which the watchdog's device monitor then follows.
  void Done() {
    done_ = true;
    if (polled_) {
      watchdog_.recorder().Finish(id_);
    } else {
      watchdog_.WatchDevice(id_, device_);
    }
  }

  Watchdog& watchdog_;
  std::unique_ptr<Request> inner_;
  int64_t id_;
  bool polled_;
  Device device_;
  bool done_ = false;
};

bool OnHost(const Tensor& buffer) { return buffer.device().is_cpu(); }

// A barrier posted with MPI_Ibarrier on the group's host communicator, so
// that its wait can be polled (and so given a deadline).
class BarrierRequest : public Request {
 public:
  explicit BarrierRequest(MPI_Comm comm) {
    TRELLIS_MPI_CHECK(MPI_Ibarrier(comm, &request_));
  }
  ~BarrierRequest() override { Wait(); }
  void Wait() override {
    if (done_) return;
    TRELLIS_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    done_ = true;
  }
  bool Poll() override {
    if (done_) return true;
    int flag = 0;
    TRELLIS_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    done_ = flag != 0;
    return done_;
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

// The ranks of `group` in `side`, in group order; empty when unknown.
std::vector<int> Members(Communicator& group, MPI_Comm side) {
  if (side == MPI_COMM_NULL) return {};
  int side_rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(side, &side_rank));
  if (group.size() == 1) return {side_rank};
  const MPI_Comm comm = MpiCommOf(group);
  if (comm == MPI_COMM_NULL) return {};
  MPI_Group mine;
  MPI_Group all;
  TRELLIS_MPI_CHECK(MPI_Comm_group(comm, &mine));
  TRELLIS_MPI_CHECK(MPI_Comm_group(side, &all));
  std::vector<int> ranks(static_cast<size_t>(group.size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::vector<int> members(ranks.size());
  TRELLIS_MPI_CHECK(MPI_Group_translate_ranks(mine, group.size(), ranks.data(),
                                              all, members.data()));
  TRELLIS_MPI_CHECK(MPI_Group_free(&mine));
  TRELLIS_MPI_CHECK(MPI_Group_free(&all));
  return members;
}

}  // namespace

MPI_Comm MpiCommOf(Communicator& group) {
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&group)) return mpi->comm();
  if (auto* staged = dynamic_cast<HostStagedCommunicator*>(&group)) {
    return staged->mpi().comm();
  }
  if (auto* routing = dynamic_cast<RoutingCommunicator*>(&group)) {
    return MpiCommOf(routing->host());
  }
  return MPI_COMM_NULL;
}

WatchdogCommunicator::WatchdogCommunicator(Communicator& inner,
                                           Watchdog& watchdog,
                                           std::vector<int> members)
    : Communicator(inner.name(), inner.rank(), inner.size()),
      inner_(inner),
      watchdog_(watchdog) {
  watchdog_.AddGroup(name(), std::move(members));
}

int64_t WatchdogCommunicator::Begin(CommOp op, int peer, int64_t bytes,
                                    bool* skip) {
  const WatchdogOptions& o = watchdog_.options();
  const int64_t seq = watchdog_.NextSeq(name());
  const int rank = watchdog_.rank();
  const bool skipped = skip != nullptr && watchdog_.TakeSkipFault(name(), seq);
  if (skip != nullptr) *skip = skipped;
  if (o.stop.Matches(rank, name(), seq)) ::raise(SIGSTOP);
  return watchdog_.Start(name(), op, peer, bytes, skipped);
}

std::unique_ptr<Request> WatchdogCommunicator::Watch(
    std::unique_ptr<Request> request, int64_t id, const Tensor& buffer) {
  return std::make_unique<WatchedRequest>(watchdog_, std::move(request), id,
                                          OnHost(buffer), buffer.device());
}

template <typename Async, typename Blocking>
std::unique_ptr<Request> WatchdogCommunicator::Collective(
    CommOp op, const Tensor& buffer, int64_t bytes, bool async, Async&& post,
    Blocking&& blocking) {
  bool skip = false;
  const int64_t id = Begin(op, -1, bytes, &skip);
  if (skip) return std::make_unique<DoneRequest>();
  const bool host = OnHost(buffer);
  if (!async && !host) {
    blocking();
    watchdog_.WatchDevice(id, buffer.device());
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> request = Watch(post(), id, buffer);
  if (async) return request;
  request->Wait();
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> WatchdogCommunicator::DoAllReduce(Tensor& buffer,
                                                           ReduceOp op,
                                                           bool async) {
  return Collective(
      CommOp::kAllReduce, buffer, static_cast<int64_t>(buffer.nbytes()), async,
      [&] { return inner_.AllReduceAsync(buffer, op); },
      [&] { inner_.AllReduce(buffer, op); });
}

std::unique_ptr<Request> WatchdogCommunicator::DoReduceScatter(
    const Tensor& input, Tensor& output, ReduceOp op, bool async) {
  return Collective(
      CommOp::kReduceScatter, input, static_cast<int64_t>(input.nbytes()),
      async, [&] { return inner_.ReduceScatterAsync(input, output, op); },
      [&] { inner_.ReduceScatter(input, output, op); });
}

std::unique_ptr<Request> WatchdogCommunicator::DoAllGather(const Tensor& input,
                                                           Tensor& output,
                                                           bool async) {
  return Collective(
      CommOp::kAllGather, input, static_cast<int64_t>(output.nbytes()), async,
      [&] { return inner_.AllGatherAsync(input, output); },
      [&] { inner_.AllGather(input, output); });
}

void WatchdogCommunicator::DoBroadcast(Tensor& buffer, int root) {
  bool skip = false;
  const int64_t id = Begin(CommOp::kBroadcast, root,
                           static_cast<int64_t>(buffer.nbytes()), &skip);
  if (skip) return;
  inner_.Broadcast(buffer, root);
  watchdog_.WatchDevice(id, buffer.device());
}

std::unique_ptr<Request> WatchdogCommunicator::DoSend(const Tensor& buffer,
                                                      int peer, int tag) {
  bool skip = false;
  const int64_t id =
      Begin(CommOp::kSend, peer, static_cast<int64_t>(buffer.nbytes()), &skip);
  if (skip) return std::make_unique<DoneRequest>();
  return Watch(inner_.Send(buffer, peer, tag), id, buffer);
}

std::unique_ptr<Request> WatchdogCommunicator::DoRecv(Tensor& buffer, int peer,
                                                      int tag) {
  bool skip = false;
  const int64_t id =
      Begin(CommOp::kRecv, peer, static_cast<int64_t>(buffer.nbytes()), &skip);
  if (skip) return std::make_unique<DoneRequest>();
  return Watch(inner_.Recv(buffer, peer, tag), id, buffer);
}

std::vector<std::unique_ptr<Request>> WatchdogCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  // A batch is posted whole: the skip fault never leaves out its members.
  std::vector<int64_t> ids;
  for (const P2POp& op : ops) {
    ids.push_back(
        Begin(op.type == P2POp::Type::kSend ? CommOp::kSend : CommOp::kRecv,
              op.peer, static_cast<int64_t>(op.buffer.nbytes()), nullptr));
  }
  std::vector<std::unique_ptr<Request>> requests = inner_.BatchSendRecv(ops);
  for (size_t i = 0; i < ops.size(); ++i) {
    requests[i] = Watch(std::move(requests[i]), ids[i], ops[i].buffer);
  }
  return requests;
}

void WatchdogCommunicator::DoBarrier() {
  bool skip = false;
  const int64_t id = Begin(CommOp::kBarrier, -1, 0, &skip);
  if (skip) return;
  // Where the group has a host MPI communicator the barrier is polled
  // there; otherwise (a group with no MPI side) the inner one blocks.
  const MPI_Comm comm = MpiCommOf(inner_);
  if (comm == MPI_COMM_NULL) {
    inner_.Barrier();
    watchdog_.recorder().Finish(id);
    return;
  }
  std::make_unique<WatchedRequest>(watchdog_,
                                   std::make_unique<BarrierRequest>(comm), id,
                                   /*polled=*/true, Device::Cpu())
      ->Wait();
}

WatchedGroups::WatchedGroups(const ProcessGroups& groups,
                             WatchdogOptions options) {
  TRELLIS_CHECK(groups.world != nullptr) << "groups without a world";
  watchdog_ =
      std::make_unique<Watchdog>(std::move(options), MpiCommOf(*groups.world));
  groups_.world = Wrap(groups.world);
  groups_.tp = Wrap(groups.tp);
  groups_.dp = Wrap(groups.dp);
  groups_.pp = Wrap(groups.pp);
  groups_.embed = Wrap(groups.embed);
  groups_.ep = Wrap(groups.ep);
  groups_.expert_dp = Wrap(groups.expert_dp);
  groups_.cp = Wrap(groups.cp);
}

Communicator* WatchedGroups::Wrap(Communicator* group) {
  if (group == nullptr) return nullptr;
  owned_.push_back(std::make_unique<WatchdogCommunicator>(
      *group, *watchdog_, Members(*group, watchdog_->side())));
  return owned_.back().get();
}

}  // namespace trellis
