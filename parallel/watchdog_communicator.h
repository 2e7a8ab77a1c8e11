// WatchdogCommunicator: a Communicator that forwards every call to another
// one, records it in its Watchdog's flight recorder (group, operation, peer,
// bytes, the group's sequence number) and waits for it under the watchdog's
// deadline (watchdog.h).
//
// On host (CPU) buffers every wait polls: the async forms' requests wait in
// Watchdog::Await(), and the blocking AllReduce, ReduceScatter and
// AllGather are issued as their async forms plus that polled wait, so a
// peer that never arrives ends the job with a report instead of a hang.
// Barrier is posted as MPI_Ibarrier on the group's host MPI communicator
// (MpiCommOf) and polled the same way (so the inner communicator's stats do
// not count it; this one's do); a group with no MPI side blocks in the
// inner Barrier. Broadcast has no async form and is only recorded (trellis
// broadcasts only while bootstrapping, before any watchdog). Calls on
// device buffers, whose waits order GPU streams rather than block the host,
// stay "waiting" in the recorder until the device has run them: the
// Watchdog's device monitor follows each from its (ordering) wait and ends
// the process when one outlives the deadline. Requests returned complete
// as the inner ones do; Poll() is forwarded.
//
// WatchedGroups wraps every group of a ProcessGroups this way with one
// shared Watchdog, whose side channel duplicates the world group's MPI
// communicator.
//
// Thread safety: as Communicator.
#ifndef TRELLIS_PARALLEL_WATCHDOG_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_WATCHDOG_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "parallel/bootstrap.h"
#include "parallel/communicator.h"
#include "parallel/watchdog.h"

namespace trellis {

class WatchdogCommunicator : public Communicator {
 public:
  // Registers the group with `watchdog` under `members` (side-channel ranks
  // in group order; empty when unknown). REQUIRES: `inner` and `watchdog`
  // outlive this communicator.
  WatchdogCommunicator(Communicator& inner, Watchdog& watchdog,
                       std::vector<int> members);

  Communicator& inner() { return inner_; }

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor& buffer, ReduceOp op,
                                       bool async) override;
  std::unique_ptr<Request> DoReduceScatter(const Tensor& input, Tensor& output,
                                           ReduceOp op, bool async) override;
  std::unique_ptr<Request> DoAllGather(const Tensor& input, Tensor& output,
                                       bool async) override;
  void DoBroadcast(Tensor& buffer, int root) override;
  std::unique_ptr<Request> DoSend(const Tensor& buffer, int peer,
                                  int tag) override;
  std::unique_ptr<Request> DoRecv(Tensor& buffer, int peer, int tag) override;
  std::vector<std::unique_ptr<Request>> DoBatchSendRecv(
      const std::vector<P2POp>& ops) override;
  void DoBarrier() override;

 private:
  // Records the start of `op`; sets `skip` (when not null) when the test
  // fault leaves it out, and stops this process when the stop fault names
  // it.
  int64_t Begin(CommOp op, int peer, int64_t bytes, bool* skip);
  // A request on `buffer`: its host wait is polled under the deadline; a
  // device buffer's operation is handed to the device monitor once waited.
  std::unique_ptr<Request> Watch(std::unique_ptr<Request> request, int64_t id,
                                 const Tensor& buffer);
  // Issues an async collective and waits for it (polled on host buffers).
  template <typename Async, typename Blocking>
  std::unique_ptr<Request> Collective(CommOp op, const Tensor& buffer,
                                      int64_t bytes, bool async, Async&& post,
                                      Blocking&& blocking);

  Communicator& inner_;
  Watchdog& watchdog_;
};

// Every group of `groups` behind a WatchdogCommunicator sharing one
// Watchdog. Collective over groups.world (duplicates its MPI communicator
// when it has one). REQUIRES: `groups` outlive this.
class WatchedGroups {
 public:
  WatchedGroups(const ProcessGroups& groups, WatchdogOptions options);

  const ProcessGroups& groups() const { return groups_; }
  Watchdog& watchdog() { return *watchdog_; }

 private:
  Communicator* Wrap(Communicator* group);

  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::unique_ptr<WatchdogCommunicator>> owned_;
  ProcessGroups groups_;
};

// The MPI communicator behind `group` (an MpiCommunicator, or the host side
// of a RoutingCommunicator, or a HostStagedCommunicator's), or
// MPI_COMM_NULL.
MPI_Comm MpiCommOf(Communicator& group);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_WATCHDOG_COMMUNICATOR_H_
